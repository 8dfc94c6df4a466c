package fstree

import (
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"path"
	"time"

	"github.com/ocierofs/ocierofs/erofs"
)

// Xattr is one extended attribute, by its full name.
type Xattr = erofs.Xattr

// Info is what StatFS.Lstat says about one path.
type Info struct {
	Mode               uint32 // full st_mode
	Uid, Gid           uint32
	Size               int64
	Mtime              time.Time
	Devmajor, Devminor uint32
	// Dev and Ino identify the inode: non-directories with equal (Dev, Ino)
	// are hard links of each other.
	Dev, Ino uint64
}

// StatFS is a read-only filesystem that can say everything a Tree holds.
// Names are as in io/fs: "." for the root, "a/b" below it. Lstat,
// Readlink and Xattrs never follow a symbolic link; Open is only called
// for regular files.
type StatFS interface {
	fs.FS
	ReadDir(name string) ([]fs.DirEntry, error)
	Lstat(name string) (Info, error)
	Readlink(name string) (string, error)
	Xattrs(name string) ([]Xattr, error)
}

// FromFS takes a snapshot of fsys. File content is hashed as it is read,
// never held in memory whole.
func FromFS(fsys StatFS) (*Tree, error) {
	w := walker{
		fsys: fsys,
		t:    newTree(),
		dirs: make(map[[2]uint64]string),
		buf:  make([]byte, 128<<10),
	}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return fmt.Errorf("fstree: %s: %w", p, err)
		case p != "." && !validName(d.Name()):
			return fmt.Errorf("fstree: %s: bad directory entry %q", path.Dir(p), d.Name())
		case w.t.nodes[p] != nil:
			return fmt.Errorf("fstree: %s: listed twice", p)
		}
		n, err := w.node(p)
		switch {
		case err != nil:
			return err
		case p == "." && !n.IsDir():
			return fmt.Errorf("fstree: root is not a directory (mode %#o)", n.Mode)
		case n.IsDir() != d.IsDir():
			return fmt.Errorf("fstree: %s: a %s, but its directory entry says otherwise", p, typeName(n.Mode))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return w.t, nil
}

type walker struct {
	fsys StatFS
	t    *Tree
	dirs map[[2]uint64]string
	buf  []byte
}

func validName(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '/' || s[i] == 0 {
			return false
		}
	}
	return true
}

// node reads the metadata (and content) of path p into a new node of the tree.
func (w *walker) node(p string) (*Node, error) {
	fi, err := w.fsys.Lstat(p)
	if err != nil {
		return nil, fmt.Errorf("fstree: %s: %w", p, err)
	}
	n := &Node{
		Path:  p,
		Mode:  fi.Mode,
		Uid:   fi.Uid,
		Gid:   fi.Gid,
		Mtime: fi.Mtime,
	}
	switch n.Type() {
	case erofs.S_IFREG:
		n.Size = fi.Size
		if n.Digest, err = w.hash(p); err != nil {
			return nil, err
		}
	case erofs.S_IFLNK:
		if n.Target, err = w.fsys.Readlink(p); err != nil {
			return nil, fmt.Errorf("fstree: %s: %w", p, err)
		}
	case erofs.S_IFCHR, erofs.S_IFBLK:
		n.Devmajor, n.Devminor = fi.Devmajor, fi.Devminor
	}
	xs, err := w.fsys.Xattrs(p)
	if err != nil {
		return nil, fmt.Errorf("fstree: %s: xattrs: %w", p, err)
	}
	if len(xs) > 0 {
		n.Xattrs = make(map[string]string, len(xs))
		for _, x := range xs {
			n.Xattrs[x.Name] = string(x.Value)
		}
	}
	key := [2]uint64{fi.Dev, fi.Ino}
	if n.IsDir() {
		// A directory has one parent. One listed twice (a crafted image,
		// a bind mount of a directory below itself) would be walked again
		// under each name, doubling with every level of such a chain.
		if first, ok := w.dirs[key]; ok {
			return nil, fmt.Errorf("fstree: %s: directory is also %s: a directory has one parent", p, first)
		}
		w.dirs[key] = p
	} else {
		w.t.inode(key, n)
	}
	w.t.nodes[p] = n
	return n, nil
}

// hash returns the SHA-256 of regular file p, read in buffer-sized pieces.
func (w *walker) hash(p string) ([32]byte, error) {
	var sum [32]byte
	f, err := w.fsys.Open(p)
	if err != nil {
		return sum, fmt.Errorf("fstree: %s: %w", p, err)
	}
	defer f.Close()
	h := sha256.New()
	// The struct hides any WriterTo, so that the copy goes through w.buf.
	if _, err := io.CopyBuffer(h, struct{ io.Reader }{f}, w.buf); err != nil {
		return sum, fmt.Errorf("fstree: %s: read: %w", p, err)
	}
	h.Sum(sum[:0])
	return sum, nil
}
