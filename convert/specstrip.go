package convert

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

// stripMarkers rewrites the layer image at path without overlayfs
// markers, if it has any: its whiteouts (character devices 0:0) are left
// out, and its directories lose their opaque and origin xattrs. The EROFS
// image spec forbids whiteouts in a layer with no overlay-lower layer
// below it (§3.6): the bottom layer of an image in the spec's media types,
// where nothing is below for them to hide (TestSpecBottomWhiteouts). The
// rewrite keeps every other inode, its metadata and data, hard links
// included, and the UUID; it reports whether there was anything to strip.
func stripMarkers(path string, opt erofs.Options) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, err
	}
	img, err := erofs.Open(f, st.Size())
	if err != nil {
		return false, err
	}
	if len(img.Devices()) > 0 {
		return false, nil // no image of convert's has extra devices
	}
	found := false
	err = img.Walk(".", func(p string, ino *erofs.Inode) error {
		m, err := isMarker(img, ino)
		found = found || m
		return err
	})
	if err != nil || !found {
		return false, err
	}

	out, err := os.CreateTemp(filepath.Dir(path), ".strip-*")
	if err != nil {
		return false, err
	}
	defer os.Remove(out.Name())
	defer out.Close()
	opt.UUID = img.Super().UUID
	b, err := erofs.NewBuilder(out, opt)
	if err != nil {
		return false, err
	}
	defer b.Close()
	links := map[uint64]string{} // nid → the first path of a linked inode
	err = img.Walk(".", func(p string, ino *erofs.Inode) error {
		if whiteoutInode(ino) {
			return nil
		}
		if p == "." {
			p = ""
		}
		if !ino.IsDir() && ino.Nlink > 1 {
			if first, ok := links[ino.Nid]; ok {
				return b.Add(erofs.Entry{Path: p, HardLink: first}, nil)
			}
			links[ino.Nid] = p
		}
		xs, err := img.InodeXattrs(ino)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		e := erofs.Entry{Path: p, Mode: ino.Mode, Uid: ino.Uid, Gid: ino.Gid, Mtime: ino.Mtime,
			Devmajor: ino.Devmajor, Devminor: ino.Devminor}
		for _, x := range xs {
			if ino.IsDir() && (x.Name == whiteout.OpaqueXattr || x.Name == whiteout.OriginXattr) {
				continue
			}
			e.Xattrs = append(e.Xattrs, x)
		}
		switch {
		case ino.IsSymlink():
			if e.Linkname, err = img.ReadlinkInode(ino); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		case ino.IsRegular():
			r, err := img.DataReader(ino)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			e.Size = ino.Size
			return b.Add(e, r)
		}
		return b.Add(e, nil)
	})
	if err != nil {
		return false, fmt.Errorf("leaving out the whiteouts: %w", err)
	}
	if err := b.Finish(); err != nil {
		return false, err
	}
	if err := out.Close(); err != nil {
		return false, err
	}
	return true, os.Rename(out.Name(), path)
}

func whiteoutInode(ino *erofs.Inode) bool {
	return ino.Mode&erofs.S_IFMT == erofs.S_IFCHR && ino.Devmajor == 0 && ino.Devminor == 0
}

// isMarker reports a whiteout, or a directory with an overlay marker.
func isMarker(img *erofs.Image, ino *erofs.Inode) (bool, error) {
	if whiteoutInode(ino) {
		return true, nil
	}
	if !ino.IsDir() {
		return false, nil
	}
	xs, err := img.InodeXattrs(ino)
	if err != nil {
		return false, err
	}
	for _, x := range xs {
		if x.Name == whiteout.OpaqueXattr || x.Name == whiteout.OriginXattr {
			return true, nil
		}
	}
	return false, nil
}
