package mkfs

import (
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/erofs"
)

// lstatFile is lstat(2) of p, not following a symbolic link.
func lstatFile(p string) (fileStat, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return fileStat{}, err
	}
	return fileStat{
		mode: uint32(st.Mode), uid: st.Uid, gid: st.Gid,
		mtimeSec: int64(st.Mtim.Sec), mtimeNsec: int64(st.Mtim.Nsec),
		nlink: uint64(st.Nlink), dev: uint64(st.Dev), ino: uint64(st.Ino),
		rdevMajor: unix.Major(uint64(st.Rdev)), rdevMinor: unix.Minor(uint64(st.Rdev)),
		size: int64(st.Size),
	}, nil
}

// readXattrs lists a file's xattrs without following a symlink.
func readXattrs(p string) ([]erofs.Xattr, error) {
	size, err := unix.Llistxattr(p, nil)
	if err != nil || size == 0 {
		if err == unix.ENOTSUP {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range strings.Split(string(buf[:size]), "\x00") {
		if n != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out []erofs.Xattr
	for _, n := range names {
		vs, err := unix.Lgetxattr(p, n, nil)
		if err != nil {
			return nil, fmt.Errorf("xattr %s: %w", n, err)
		}
		v := make([]byte, vs)
		vs, err = unix.Lgetxattr(p, n, v)
		if err != nil {
			return nil, fmt.Errorf("xattr %s: %w", n, err)
		}
		out = append(out, erofs.Xattr{Name: n, Value: v[:vs]})
	}
	return out, nil
}
