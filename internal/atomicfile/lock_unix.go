//go:build unix

package atomicfile

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// errLocked is tryLock's error when another holds the lock.
var errLocked = unix.EWOULDBLOCK

// tryLock takes an exclusive flock of f without waiting.
func tryLock(f *os.File) error {
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
}

// OpenDir opens directory path to lock it. A FIFO or a file there fails
// here instead of blocking (O_DIRECTORY).
func OpenDir(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// NoLocks reports an flock error that means the filesystem has no locks
// (some network and FUSE filesystems; NFS gives EBADF for a directory).
func NoLocks(err error) bool {
	return errors.Is(err, unix.ENOLCK) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) ||
		errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EBADF)
}
