package mkfs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"time"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

// BuildDir converts a directory tree, as lstat and listxattr see it, into an
// image on w. Whiteout rules do not apply: a directory is taken literally,
// except that one holding overlayfs whiteouts (character devices 0:0, as
// an overlay's upper directory has them) gets the empty
// trusted.overlay.origin a tar layer's whiteouts give it (whiteout's
// package doc says why), as mkfs.erofs does.
// Without a UUID in the options, the UUID is derived from a hash of every
// entry's metadata and data, so the same tree gives the same image.
// It needs Linux (lstat and xattrs as Linux has them): elsewhere it fails
// on the first path.
func BuildDir(w io.WriterAt, root string, opt convert.Options) (*convert.Result, error) {
	b, err := convert.NewBuilder(w, opt)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	d := &dirWalk{root: root, b: b, h: sha256.New(), res: &convert.Result{},
		links: map[devIno]string{}, whiteoutDirs: map[string]bool{}, origin: map[string]bool{}}
	if err := filepath.WalkDir(root, d.add); err != nil {
		return nil, err
	}
	if err := d.setOrigins(); err != nil {
		return nil, err
	}
	res := d.res
	res.UUID = opt.Erofs.UUID
	if res.UUID == ([16]byte{}) && !opt.KeepUUID {
		res.UUID = convert.LayerUUID("sha256:" + hex.EncodeToString(d.h.Sum(nil)))
	}
	b.SetUUID(res.UUID)
	return res, b.Finish()
}

// devIno names an inode of the tree.
type devIno struct{ dev, ino uint64 }

// dirWalk is BuildDir's walk of the tree: the builder, the hash of every
// entry (the UUID's source), the first path of every inode with hard
// links, and the directories holding whiteouts.
type dirWalk struct {
	root  string
	b     *erofs.Builder
	h     hash.Hash
	res   *convert.Result
	links map[devIno]string
	// Directories holding whiteouts, and those with an origin already.
	whiteoutDirs, origin map[string]bool
}

// add adds the path p of the walk to the image: a hard link to the first
// path of its inode, or an entry of its own.
func (d *dirWalk) add(p string, _ fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(d.root, p)
	if err != nil {
		return err
	}
	rel = filepath.ToSlash(rel)
	st, err := lstatFile(p)
	if err != nil {
		return &fs.PathError{Op: "lstat", Path: p, Err: err} // gone since it was listed
	}
	if st.mode&erofs.S_IFMT == erofs.S_IFCHR && st.rdevMajor == 0 && st.rdevMinor == 0 {
		// overlayfs may link one whiteout inode everywhere.
		d.whiteoutDirs[path.Dir(rel)] = true
	}
	if st.mode&erofs.S_IFMT != erofs.S_IFDIR && st.nlink > 1 {
		k := devIno{st.dev, st.ino}
		if first, ok := d.links[k]; ok {
			fmt.Fprintf(d.h, "%s\x00link\x00%s\x00", rel, first)
			d.res.Entries++
			return d.b.Add(erofs.Entry{Path: rel, HardLink: first}, nil)
		}
		d.links[k] = rel
	}
	e := erofs.Entry{
		Path:  rel,
		Mode:  st.mode,
		Uid:   st.uid,
		Gid:   st.gid,
		Mtime: time.Unix(st.mtimeSec, st.mtimeNsec),
	}
	if err := d.xattrs(p, &e); err != nil {
		return err
	}
	return d.addEntry(p, st, e)
}

// xattrs gives e the xattrs of p that an image can hold; the others are
// left out with a warning. An origin xattr marks e's directory as having
// one already.
func (d *dirWalk) xattrs(p string, e *erofs.Entry) error {
	xs, err := readXattrs(p)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	for _, x := range xs {
		if x.Name == whiteout.OriginXattr {
			d.origin[e.Path] = true
		}
		if err := erofs.CheckXattrName(x.Name); err != nil {
			d.res.Warnings = append(d.res.Warnings, fmt.Sprintf("%s: xattr %q left out: %v", e.Path, x.Name, err))
			continue
		}
		e.Xattrs = append(e.Xattrs, x)
	}
	return nil
}

// addEntry completes e by its type (a regular file's data, a symlink's
// target, a device's number), hashes it and adds it.
func (d *dirWalk) addEntry(p string, st fileStat, e erofs.Entry) error {
	var data io.Reader
	switch st.mode & erofs.S_IFMT {
	case erofs.S_IFREG:
		e.Size = st.size
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		// A file that changes while it is read must not desync the image.
		data = io.TeeReader(io.LimitReader(f, st.size), d.h)
	case erofs.S_IFLNK:
		var err error
		if e.Linkname, err = os.Readlink(p); err != nil {
			return err
		}
	case erofs.S_IFCHR, erofs.S_IFBLK:
		e.Devmajor, e.Devminor = st.rdevMajor, st.rdevMinor
	}
	fmt.Fprintf(d.h, "%s\x00%o %d %d %d.%09d %d %d:%d %s\x00", e.Path, e.Mode, e.Uid, e.Gid,
		st.mtimeSec, st.mtimeNsec, e.Size, e.Devmajor, e.Devminor, e.Linkname)
	for _, x := range e.Xattrs {
		fmt.Fprintf(d.h, "%s=%x\x00", x.Name, x.Value)
	}
	d.res.Entries++
	return d.b.Add(e, data)
}

// setOrigins gives each directory holding whiteouts, in path order, the
// empty origin xattr a tar layer's whiteouts give it, unless it has one.
func (d *dirWalk) setOrigins() error {
	dirs := make([]string, 0, len(d.whiteoutDirs))
	for dir := range d.whiteoutDirs {
		if !d.origin[dir] {
			dirs = append(dirs, dir)
		}
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		if err := d.b.SetXattr(dir, whiteout.OriginXattr, nil); err != nil {
			return err
		}
	}
	return nil
}

// fileStat is what BuildDir takes from lstat (lstatFile): the mode in
// Linux's form (type bits included), the owner, the modification time as
// seconds and nanoseconds, the device and inode that tell hard links apart,
// the device number of a device file, and the size.
type fileStat struct {
	mode, uid, gid       uint32
	mtimeSec, mtimeNsec  int64
	nlink, dev, ino      uint64
	rdevMajor, rdevMinor uint32
	size                 int64
}
