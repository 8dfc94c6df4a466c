package fstree

import "github.com/ocierofs/ocierofs/erofs"

// FromImage takes a snapshot of an EROFS image through its reader, without
// mounting it. Non-directories with the same nid are hard links.
func FromImage(img *erofs.Image) (*Tree, error) {
	return FromFS(imageFS{img})
}

// imageFS adapts an erofs.Image to StatFS: the image has all but Lstat.
type imageFS struct{ *erofs.Image }

func (f imageFS) Lstat(name string) (Info, error) {
	ino, err := f.Image.Lstat(name)
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
