//go:build !unix

package atomicfile

import (
	"errors"
	"fmt"
	"os"
)

// Without flock, writers in other processes do not take turns: this
// system is treated as a filesystem without locks (NoLocks).

// errLocked is never returned here.
var errLocked = errors.New("locked")

// errNoFlock is tryLock's error: there is no flock to take.
var errNoFlock = fmt.Errorf("file locks (flock) need a Unix system: %w", errors.ErrUnsupported)

func tryLock(f *os.File) error { return errNoFlock }

// OpenDir opens directory path to lock it; a file there fails.
func OpenDir(path string) (*os.File, error) {
	d, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	if fi, err := d.Stat(); err != nil || !fi.IsDir() {
		d.Close()
		if err == nil {
			err = &os.PathError{Op: "open", Path: path, Err: errors.New("not a directory")}
		}
		return nil, err
	}
	return d, nil
}

// NoLocks reports the error of a system without file locks.
func NoLocks(err error) bool { return errors.Is(err, errors.ErrUnsupported) }
