package outfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// A Set is files that appear under their names only when all of them
// are complete: each is written as a temporary file beside its name (or
// beside the file a symbolic link names) and renamed over it, keeping an
// existing file's permissions and owner. A name that is a device or a FIFO
// is written in place, at the end, from a temporary file in the system's
// temporary directory: a failed build leaves no half-written device either.
type Set []output

// output is one file a build writes: f, which becomes name on commit.
type output struct {
	f       *os.File
	name    string      // where it goes, symbolic links followed
	special bool        // a device or FIFO, written in place
	unnamed bool        // an O_TMPFILE file, linked in at commit
	old     os.FileInfo // what name was, if anything
}

// Create makes the temporary file that becomes name on commit.
func (o *Set) Create(name string) (*os.File, error) {
	target, fi, err := Resolve(name)
	if err != nil {
		return nil, err
	}
	dir, special := filepath.Dir(target), false
	switch {
	case fi == nil || fi.Mode().IsRegular():
	case fi.IsDir():
		return nil, fmt.Errorf("%s is a directory", name)
	default:
		dir, special = os.TempDir(), true
	}
	f, unnamed, err := CreateUnnamed(dir, "."+filepath.Base(target)+".tmp-")
	if err != nil {
		// The temporary file's name means nothing to the user: name the
		// directory.
		if _, serr := os.Stat(dir); serr != nil {
			return nil, fmt.Errorf("cannot write %s: directory %s: %w", name, dir, pathErr(serr))
		}
		return nil, fmt.Errorf("cannot write %s in %s: %w", name, dir, pathErr(err))
	}
	*o = append(*o, output{f: f, name: target, special: special, unnamed: unnamed, old: fi})
	return f, nil
}

// pathErr is the cause of a PathError, without the path.
func pathErr(err error) error {
	if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Resolve follows the symbolic links of name (a dangling one to the
// file it would create) and returns the path and what is there, if
// anything.
func Resolve(name string) (string, os.FileInfo, error) {
	for range 40 {
		fi, err := os.Lstat(name)
		if errors.Is(err, fs.ErrNotExist) {
			return name, nil, nil
		}
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			return name, fi, err
		}
		to, err := os.Readlink(name)
		if err != nil {
			return "", nil, err
		}
		if !filepath.IsAbs(to) {
			to = filepath.Join(filepath.Dir(name), to)
		}
		name = to
	}
	return "", nil, fmt.Errorf("%s: too many levels of symbolic links", name)
}

// Commit gives every file its name, in the order they were created (a
// blob before the image that needs it).
func (o *Set) Commit() error {
	for _, out := range *o {
		var err error
		if out.special {
			err = out.copyInto()
		} else {
			err = out.rename()
		}
		if err != nil {
			return err
		}
	}
	*o = nil
	return nil
}

// rename puts f in place of name, with the permissions and owner of the
// file it replaces (0644 and the caller's for a new one).
func (out output) rename() error {
	f, name := out.f, out.name
	mode := fs.FileMode(0o644)
	if out.old != nil {
		mode = out.old.Mode().Perm()
		if uid, gid, ok := fileOwner(out.old); ok {
			f.Chown(uid, gid) // best effort: not ours to give away
		}
	}
	if err := f.Chmod(mode); err != nil {
		return err
	}
	tmp := f.Name()
	if out.unnamed {
		// A name of its own first: a link cannot replace a file.
		var err error
		if tmp, err = linkTemp(f, filepath.Dir(name), "."+filepath.Base(name)+".tmp-"); err != nil {
			return err
		}
	}
	if err := f.Close(); err != nil {
		if out.unnamed {
			os.Remove(tmp)
		}
		return err
	}
	if err := os.Rename(tmp, name); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("rename to %s: %w", name, err)
	}
	return nil
}

// linkTemp links the unnamed file f into dir under a new name made of
// prefix and a random number, and returns it.
func linkTemp(f *os.File, dir, prefix string) (string, error) {
	for {
		name := filepath.Join(dir, fmt.Sprintf("%s%d", prefix, rand.Uint32()))
		err := LinkUnnamed(f, name)
		if !errors.Is(err, fs.ErrExist) {
			return name, err
		}
	}
}

// copyInto writes the finished f into the device or FIFO at name, and
// removes f.
func (out output) copyInto() error {
	f, name := out.f, out.name
	if !out.unnamed {
		defer os.Remove(f.Name())
	}
	defer f.Close()
	dev, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer dev.Close()
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	// A block device has a size to respect and is written from its
	// start; a character device or a FIFO takes the bytes as they come.
	if end, err := dev.Seek(0, io.SeekEnd); err == nil && end > 0 {
		if size > end {
			return fmt.Errorf("%s: the image takes %d bytes, the device has %d", name, size, end)
		}
		if _, err := dev.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if _, err := io.Copy(dev, f); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return dev.Close()
}

// Abort removes what is not yet committed.
func (o *Set) Abort() {
	for _, out := range *o {
		out.f.Close()
		if !out.unnamed {
			os.Remove(out.f.Name())
		}
	}
	*o = nil
}
