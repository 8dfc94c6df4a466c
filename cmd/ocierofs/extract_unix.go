//go:build unix

package main

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// The system calls of extract: the mode bits as they are (os.Chmod drops
// none, but goes through a FileMode), device nodes, xattrs and times of
// the entry itself, not of what a symbolic link names.

func extractSupported() error { return nil }

func chmodPath(p string, mode uint32) error {
	return unix.Fchmodat(unix.AT_FDCWD, p, mode, 0)
}

func mknod(p string, mode, major, minor uint32) error {
	return mknodDev(unix.Mknod, p, mode, unix.Mkdev(major, minor))
}

// mknodDev calls mknod with dev in the type it takes: int on Linux and
// macOS, uint64 on the BSDs.
func mknodDev[T int | uint64](mknod func(string, uint32, T) error, p string, mode uint32, dev uint64) error {
	return mknod(p, mode, T(dev))
}

func lsetxattr(p, name string, value []byte) error {
	return unix.Lsetxattr(p, name, value, 0)
}

// xattrRefused reports an xattr an unprivileged user may not set, or one
// the filesystem does not take: extract leaves those out.
func xattrRefused(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOTSUP)
}

func lutimes(p string, mtime time.Time) error {
	ts := unix.NsecToTimespec(mtime.UnixNano())
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
}
