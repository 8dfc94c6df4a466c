package outfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
)

// CreateUnnamed makes a file in dir that has no name until it is linked
// in (O_TMPFILE): whatever ends the process, Ctrl-C or kill -9, it leaves
// nothing behind, where a named temp file stayed beside the output, as
// large as the image. Where the filesystem has no such files, it makes a
// named temp file (prefix*) instead, and unnamed is false.
func CreateUnnamed(dir, prefix string) (f *os.File, unnamed bool, err error) {
	fd := -1
	if canLinkUnnamed() {
		fd, err = unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	}
	if fd >= 0 && err == nil {
		// The name is for errors and for the directory it is in.
		return os.NewFile(uintptr(fd), filepath.Join(dir, prefix+"unnamed")), true, nil
	}
	f, err = os.CreateTemp(dir, prefix+"*")
	return f, false, err
}

// canLinkUnnamed reports whether an unnamed file can be given a name
// through /proc. Without /proc, linkat's AT_EMPTY_PATH needs a capability
// that may be missing, and a whole image would be built, then lost: named
// temp files are made instead.
var canLinkUnnamed = sync.OnceValue(func() bool {
	_, err := os.Stat("/proc/self/fd")
	return err == nil
})

// LinkUnnamed gives the unnamed file f the name name (which must not
// exist) in its directory.
func LinkUnnamed(f *os.File, name string) error {
	// Through /proc, as linkat with AT_EMPTY_PATH needs a capability.
	err := unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), unix.AT_FDCWD, name, unix.AT_SYMLINK_FOLLOW)
	if errors.Is(err, unix.ENOENT) {
		err = unix.Linkat(int(f.Fd()), "", unix.AT_FDCWD, name, unix.AT_EMPTY_PATH)
	}
	if err != nil {
		return &os.LinkError{Op: "link", Old: f.Name(), New: name, Err: err}
	}
	return nil
}
