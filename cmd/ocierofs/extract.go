package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/erofs"
)

var extractCommand = &cli.Command{
	Name:      "extract",
	Usage:     "unpack an image into a directory (modes, owners, xattrs, devices and hard links when root)",
	ArgsUsage: "IMAGE DIR",
	Flags:     imageRefFlags(),
	Description: "DIR must be empty or not exist yet. Nothing is written outside it, and on an\n" +
		"error DIR is left as it was. All-zero runs of files and holes become holes.",
	Action: func(c *cli.Context) error {
		if c.NArg() != 2 {
			return fmt.Errorf("extract: want IMAGE DIR")
		}
		oi, err := openImageArg(c, c.Args().First())
		if err != nil {
			return err
		}
		defer oi.Close()
		img := oi.img
		ctx, stop := interruptible(c.Context)
		defer stop()
		return extract(ctx, img, c.Args().Get(1), os.Geteuid() == 0)
	},
}

// extract writes the tree of img under dir, which must be empty or not
// exist. As root it restores owners, devices and every xattr; otherwise
// what an unprivileged user can. It walks the image by inode (erofs.Walk):
// it descends only into directories it has just made, so no entry of the
// image, whatever its directory entry claims, can lead it through a
// symbolic link out of dir. Directory modes and times are set last,
// deepest first, so that filling a read-only directory works and
// creating entries does not change the times. On an error, or once ctx is
// done (Ctrl-C), everything it made goes. It needs a Unix system
// (extract_unix.go).
func extract(ctx context.Context, img *erofs.Image, dir string, root bool) (err error) {
	if err := extractSupported(); err != nil {
		return err
	}
	made, err := emptyDir(dir)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			if rerr := undoExtract(dir, made); rerr != nil {
				err = fmt.Errorf("%w (and removing what was extracted: %v)", err, rerr)
			}
		}
	}()
	x := extractor{ctx: ctx, img: img, root: root, links: map[uint64]string{}, buf: make([]byte, 128<<10)}
	type dirMeta struct {
		dst string
		ino *erofs.Inode
	}
	var dirs []dirMeta
	err = img.Walk(".", func(p string, ino *erofs.Inode) error {
		if err := context.Cause(ctx); err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if ino.IsDir() {
			if p != "." {
				if err := os.Mkdir(dst, 0o700); err != nil {
					return err
				}
			}
			dirs = append(dirs, dirMeta{dst, ino})
			return x.restoreMeta(p, dst, ino)
		}
		return x.entry(p, dst, ino)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := chmodPath(d.dst, d.ino.Mode&0o7777); err != nil {
			return err
		}
		if err := setTime(d.dst, d.ino); err != nil {
			return err
		}
	}
	return nil
}

// emptyDir makes dir, or checks that it is an empty directory; made says
// which.
func emptyDir(dir string) (made bool, err error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return false, err
	}
	if err := os.Mkdir(dir, 0o700); err == nil {
		return true, nil
	} else if !errors.Is(err, fs.ErrExist) {
		return false, err
	}
	f, err := os.Open(dir)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.IsDir() {
		return false, fmt.Errorf("extract: %s exists and is not a directory", dir)
	}
	if names, _ := f.Readdirnames(1); len(names) > 0 {
		return false, fmt.Errorf("extract: %s is not empty", dir)
	}
	return false, nil
}

// undoExtract removes what extract made: dir itself if it made it, else
// dir's entries. Directories are made writable first: an unprivileged
// user cannot otherwise empty a read-only one.
func undoExtract(dir string, made bool) error {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	if made {
		return os.RemoveAll(dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

type extractor struct {
	ctx   context.Context
	img   *erofs.Image
	root  bool
	links map[uint64]string // nid → first extracted path
	buf   []byte
}

// entry extracts one file that is not a directory.
func (x *extractor) entry(p, dst string, ino *erofs.Inode) error {
	if first, ok := x.links[ino.Nid]; ok {
		return os.Link(first, dst)
	}
	switch ino.Mode & erofs.S_IFMT {
	case erofs.S_IFREG:
		if err := x.file(p, dst, ino); err != nil {
			return err
		}
	case erofs.S_IFLNK:
		t, err := x.img.ReadlinkInode(ino)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if err := os.Symlink(t, dst); err != nil {
			return err
		}
	case erofs.S_IFCHR, erofs.S_IFBLK, erofs.S_IFIFO, erofs.S_IFSOCK:
		if ino.Mode&erofs.S_IFMT != erofs.S_IFIFO && !x.root {
			fmt.Fprintf(os.Stderr, "warning: %s: devices need root, skipped\n", p)
			return nil
		}
		if err := mknod(dst, ino.Mode&erofs.S_IFMT|0o600, ino.Devmajor, ino.Devminor); err != nil {
			return fmt.Errorf("%s: mknod: %w", p, err)
		}
	default:
		return fmt.Errorf("%s: nid %d: unknown file type %#o", p, ino.Nid, ino.Mode&erofs.S_IFMT)
	}
	if err := x.restoreMeta(p, dst, ino); err != nil {
		return err
	}
	if ino.Mode&erofs.S_IFMT != erofs.S_IFLNK {
		if err := chmodPath(dst, ino.Mode&0o7777); err != nil {
			return err
		}
	}
	if err := setTime(dst, ino); err != nil {
		return err
	}
	if ino.Nlink > 1 {
		// Only once made: the other names of a device skipped above
		// are skipped too.
		x.links[ino.Nid] = dst
	}
	return nil
}

// file writes a regular file's data, leaving holes where the image has
// holes (it skips them unread) and where the data is zeros, so that a
// sparse file stays sparse and an image of a few KiB that declares a huge
// file cannot fill the disk.
func (x *extractor) file(p, dst string, ino *erofs.Inode) error {
	r, err := x.img.DataReader(ino)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	w, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer w.Close()
	for off := int64(0); off < ino.Size; {
		data, err := x.img.NextData(ino, off)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if off = data; off == ino.Size {
			break
		}
		if err := context.Cause(x.ctx); err != nil {
			return err // in a big file too
		}
		n := int(min(int64(len(x.buf)), ino.Size-off))
		b := x.buf[:n]
		if _, err := r.ReadAt(b, off); err != nil && !(err == io.EOF && off+int64(n) == ino.Size) {
			return fmt.Errorf("%s: %w", p, err)
		}
		if err := writeData(w, b, off); err != nil {
			return err
		}
		off += int64(n)
	}
	if err := w.Truncate(ino.Size); err != nil {
		return err
	}
	return w.Close()
}

var zeros = make([]byte, 128<<10)

func allZero(b []byte) bool { return bytes.Equal(b, zeros[:len(b)]) }

// holeGrain is the smallest run of zeros writeData leaves as a hole: a
// filesystem's block.
const holeGrain = 4096

// writeData writes b at off, but for its runs of holeGrain zeros (counted
// from off), which stay holes: the zeros a read finds at the start of a
// hole, or between two pieces of data.
func writeData(w io.WriterAt, b []byte, off int64) error {
	start := -1 // of the data not written yet
	flush := func(end int) error {
		if start < 0 {
			return nil
		}
		_, err := w.WriteAt(b[start:end], off+int64(start))
		start = -1
		return err
	}
	for i := 0; i < len(b); i += holeGrain {
		if allZero(b[i:min(i+holeGrain, len(b))]) {
			if err := flush(i); err != nil {
				return err
			}
		} else if start < 0 {
			start = i
		}
	}
	return flush(len(b))
}

// restoreMeta sets owner and xattrs. chown comes before the chmod that
// follows it because chown clears setuid and setgid.
func (x *extractor) restoreMeta(p, dst string, ino *erofs.Inode) error {
	if x.root {
		if err := os.Lchown(dst, int(ino.Uid), int(ino.Gid)); err != nil {
			return err
		}
	}
	xs, err := x.img.InodeXattrs(ino)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	for _, a := range xs {
		if err := lsetxattr(dst, a.Name, a.Value); err != nil {
			if !x.root && xattrRefused(err) {
				continue
			}
			return fmt.Errorf("%s: xattr %s: %w", p, a.Name, err)
		}
	}
	return nil
}

func setTime(dst string, ino *erofs.Inode) error { return lutimes(dst, ino.Mtime) }
