package fstree

import (
	"io/fs"

	"github.com/ocierofs/ocierofs/erofs"
)

// FromImage takes a snapshot of an EROFS image through its reader, without
// mounting it. Non-directories with the same nid are hard links.
func FromImage(img *erofs.Image) (*Tree, error) {
	return FromFS(imageFS{img})
}

// imageFS adapts an erofs.Image to StatFS.
type imageFS struct{ img *erofs.Image }

func (f imageFS) Open(name string) (fs.File, error) { return f.img.Open(name) }

func (f imageFS) ReadDir(name string) ([]fs.DirEntry, error) { return f.img.ReadDir(name) }

func (f imageFS) Readlink(name string) (string, error) { return f.img.Readlink(name) }

func (f imageFS) Lstat(name string) (Info, error) {
	ino, err := f.img.Lstat(name)
	if err != nil {
		return Info{}, err
	}
	return Info{
		Mode:     ino.Mode,
		Uid:      ino.Uid,
		Gid:      ino.Gid,
		Size:     ino.Size,
		Mtime:    ino.Mtime,
		Devmajor: ino.Devmajor,
		Devminor: ino.Devminor,
		Ino:      ino.Nid,
	}, nil
}

func (f imageFS) Xattrs(name string) ([]Xattr, error) {
	xs, err := f.img.Xattrs(name)
	if err != nil {
		return nil, err
	}
	out := make([]Xattr, len(xs))
	for i, x := range xs {
		out[i] = Xattr{Name: x.Name, Value: x.Value}
	}
	return out, nil
}
