package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/erofs"
)

var extractCommand = &cli.Command{
	Name:      "extract",
	Usage:     "unpack an image into a directory (modes, owners, xattrs, devices and hard links when root)",
	ArgsUsage: "IMAGE DIR",
	Action: func(c *cli.Context) error {
		if c.NArg() != 2 {
			return fmt.Errorf("extract: want IMAGE DIR")
		}
		img, f, err := openImage(c.Args().First())
		if err != nil {
			return err
		}
		defer f.Close()
		return extract(img, c.Args().Get(1), os.Geteuid() == 0)
	},
}

// extract writes the tree of img under dir. As root it restores owners,
// devices and every xattr; otherwise what an unprivileged user can.
// Directory times are set last, deepest first, so that creating their
// entries does not change them.
func extract(img *erofs.Image, dir string, root bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	links := map[uint64]string{} // nid → first extracted path
	var dirs []string
	err := fs.WalkDir(img, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		ino, err := img.Lstat(p)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if !ino.IsDir() && ino.Nlink > 1 {
			if first, ok := links[ino.Nid]; ok {
				return os.Link(first, dst)
			}
			links[ino.Nid] = dst
		}
		perm := ino.Mode & 0o7777
		switch ino.Mode & erofs.S_IFMT {
		case erofs.S_IFDIR:
			if p != "." {
				if err := os.Mkdir(dst, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
					return err
				}
			}
			dirs = append(dirs, p)
		case erofs.S_IFREG:
			if err := extractFile(img, p, dst); err != nil {
				return err
			}
		case erofs.S_IFLNK:
			t, err := img.Readlink(p)
			if err != nil {
				return err
			}
			if err := os.Symlink(t, dst); err != nil {
				return err
			}
		case erofs.S_IFCHR, erofs.S_IFBLK, erofs.S_IFIFO, erofs.S_IFSOCK:
			if ino.Mode&erofs.S_IFMT != erofs.S_IFIFO && !root {
				fmt.Fprintf(os.Stderr, "warning: %s: devices need root, skipped\n", p)
				return nil
			}
			dev := int(unix.Mkdev(ino.Devmajor, ino.Devminor))
			if err := unix.Mknod(dst, ino.Mode&erofs.S_IFMT|0o600, dev); err != nil {
				return fmt.Errorf("%s: mknod: %w", p, err)
			}
		}
		return restoreMeta(img, p, dst, ino, perm, root)
	})
	if err != nil {
		return err
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		ino, err := img.Lstat(dirs[i])
		if err != nil {
			return err
		}
		if err := setTime(filepath.Join(dir, filepath.FromSlash(dirs[i])), ino); err != nil {
			return err
		}
	}
	return nil
}

func extractFile(img *erofs.Image, p, dst string) error {
	r, err := img.Open(p)
	if err != nil {
		return err
	}
	defer r.Close()
	w, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, r); err != nil {
		w.Close()
		return fmt.Errorf("%s: %w", p, err)
	}
	return w.Close()
}

// restoreMeta sets owner, xattrs, mode and (except for directories) times.
// chown comes before chmod because chown clears setuid and setgid.
func restoreMeta(img *erofs.Image, p, dst string, ino *erofs.Inode, perm uint32, root bool) error {
	if root {
		if err := os.Lchown(dst, int(ino.Uid), int(ino.Gid)); err != nil {
			return err
		}
	}
	xs, err := img.Xattrs(p)
	if err != nil {
		return err
	}
	for _, x := range xs {
		if err := unix.Lsetxattr(dst, x.Name, x.Value, 0); err != nil {
			if !root && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOTSUP)) {
				continue
			}
			return fmt.Errorf("%s: xattr %s: %w", p, x.Name, err)
		}
	}
	if ino.Mode&erofs.S_IFMT != erofs.S_IFLNK {
		if err := unix.Fchmodat(unix.AT_FDCWD, dst, perm, 0); err != nil {
			return err
		}
	}
	if ino.IsDir() {
		return nil
	}
	return setTime(dst, ino)
}

func setTime(dst string, ino *erofs.Inode) error {
	ts := unix.NsecToTimespec(ino.Mtime.UnixNano())
	return unix.UtimesNanoAt(unix.AT_FDCWD, dst, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}
