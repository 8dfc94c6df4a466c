package convert

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"time"

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
func BuildDir(w io.WriterAt, root string, opt Options) (*Result, error) {
	b, err := newBuilder(w, opt)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	h := sha256.New()
	type devIno struct{ dev, ino uint64 }
	links := map[devIno]string{}
	res := &Result{}
	// Directories holding whiteouts, and those with an origin already.
	whiteoutDirs, origin := map[string]bool{}, map[string]bool{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		st, err := lstatFile(p)
		if err != nil {
			return &fs.PathError{Op: "lstat", Path: p, Err: err} // gone since it was listed
		}
		e := erofs.Entry{
			Path:  rel,
			Mode:  st.mode,
			Uid:   st.uid,
			Gid:   st.gid,
			Mtime: time.Unix(st.mtimeSec, st.mtimeNsec),
		}
		if st.mode&erofs.S_IFMT == erofs.S_IFCHR && st.rdevMajor == 0 && st.rdevMinor == 0 {
			// overlayfs may link one whiteout inode everywhere.
			whiteoutDirs[path.Dir(rel)] = true
		}
		if st.mode&erofs.S_IFMT != erofs.S_IFDIR && st.nlink > 1 {
			k := devIno{st.dev, st.ino}
			if first, ok := links[k]; ok {
				fmt.Fprintf(h, "%s\x00link\x00%s\x00", rel, first)
				res.Entries++
				return b.Add(erofs.Entry{Path: rel, HardLink: first}, nil)
			}
			links[k] = rel
		}
		xs, err := readXattrs(p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, x := range xs {
			if x.Name == whiteout.OriginXattr {
				origin[rel] = true
			}
			if err := erofs.CheckXattrName(x.Name); err != nil {
				res.Warnings = append(res.Warnings, fmt.Sprintf("%s: xattr %q left out: %v", rel, x.Name, err))
				continue
			}
			e.Xattrs = append(e.Xattrs, x)
		}
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
			data = io.TeeReader(io.LimitReader(f, st.size), h)
		case erofs.S_IFLNK:
			if e.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case erofs.S_IFCHR, erofs.S_IFBLK:
			e.Devmajor, e.Devminor = st.rdevMajor, st.rdevMinor
		}
		fmt.Fprintf(h, "%s\x00%o %d %d %d.%09d %d %d:%d %s\x00", rel, e.Mode, e.Uid, e.Gid,
			st.mtimeSec, st.mtimeNsec, e.Size, e.Devmajor, e.Devminor, e.Linkname)
		for _, x := range e.Xattrs {
			fmt.Fprintf(h, "%s=%x\x00", x.Name, x.Value)
		}
		res.Entries++
		if err := b.Add(e, data); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	dirs := make([]string, 0, len(whiteoutDirs))
	for d := range whiteoutDirs {
		if !origin[d] {
			dirs = append(dirs, d)
		}
	}
	sort.Strings(dirs)
	for _, d := range dirs {
		if err := b.SetXattr(d, whiteout.OriginXattr, nil); err != nil {
			return nil, err
		}
	}
	res.UUID = opt.Erofs.UUID
	if res.UUID == ([16]byte{}) && !opt.KeepUUID {
		res.UUID = LayerUUID("sha256:" + hex.EncodeToString(h.Sum(nil)))
	}
	b.SetUUID(res.UUID)
	return res, b.Finish()
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
