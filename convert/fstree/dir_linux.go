package fstree

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/erofs"
)

// FromDir takes a snapshot of the tree at dir. Symbolic links are never
// followed, except that dir itself may be one. Hard links are found by
// (device, inode) among non-directories.
func FromDir(dir string) (*Tree, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("fstree: %w", err)
	}
	return FromFS(dirFS(root))
}

// dirFS is a StatFS over a directory of the host.
type dirFS string

func (d dirFS) path(name string) string {
	if name == "." {
		return string(d)
	}
	return string(d) + "/" + name
}

func (d dirFS) Open(name string) (fs.File, error) {
	if !erofs.ValidPath(name) { // fs.ValidPath refuses names that are not UTF-8
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	// O_NOFOLLOW: a file swapped for a symlink after Lstat is not read
	// through.
	return os.OpenFile(d.path(name), os.O_RDONLY|unix.O_NOFOLLOW, 0)
}

func (d dirFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(d.path(name)) }

func (d dirFS) Readlink(name string) (string, error) { return os.Readlink(d.path(name)) }

func (d dirFS) Lstat(name string) (Info, error) {
	var st unix.Stat_t
	if err := unix.Lstat(d.path(name), &st); err != nil {
		return Info{}, &fs.PathError{Op: "lstat", Path: name, Err: err}
	}
	fi := Info{
		Mode:  st.Mode,
		Uid:   st.Uid,
		Gid:   st.Gid,
		Size:  st.Size,
		Mtime: time.Unix(int64(st.Mtim.Sec), int64(st.Mtim.Nsec)),
		Dev:   st.Dev,
		Ino:   st.Ino,
	}
	if t := st.Mode & erofs.S_IFMT; t == erofs.S_IFCHR || t == erofs.S_IFBLK {
		fi.Devmajor, fi.Devminor = unix.Major(st.Rdev), unix.Minor(st.Rdev)
	}
	return fi, nil
}

// Xattrs reads the xattrs of name. The kernel bounds an xattr list and
// a value at 64 KiB (XATTR_LIST_MAX, XATTR_SIZE_MAX), so a buffer of
// that size always takes them.
func (d dirFS) Xattrs(name string) ([]Xattr, error) {
	p, list, val := d.path(name), []byte(nil), []byte(nil)
	n, err := unix.Llistxattr(p, nil)
	if n > 0 { // most files have none: no buffers then
		list, val = make([]byte, 64<<10), make([]byte, 64<<10)
		n, err = unix.Llistxattr(p, list)
	}
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, &fs.PathError{Op: "llistxattr", Path: name, Err: err}
	}
	var xs []Xattr
	for _, x := range strings.Split(string(list[:n]), "\x00") {
		if x == "" {
			continue
		}
		v, err := unix.Lgetxattr(p, x, val)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, &fs.PathError{Op: "lgetxattr " + x, Path: name, Err: err}
		}
		xs = append(xs, Xattr{Name: x, Value: bytes.Clone(val[:v])})
	}
	return xs, nil
}
