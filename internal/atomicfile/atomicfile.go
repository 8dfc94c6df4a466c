// Package atomicfile writes files that appear whole or not at all: into a
// temp file beside the target (".tmp-NAME-*", which a sweep of a killed
// run's leftovers can match), synced, then renamed or linked into place.
// OCI layouts (their blobs and index.json) and the layer content cache
// (entries, sidecars, lower records) are written with it. Writers in other
// processes take turns with LockDir.
package atomicfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"time"
)

// WriteTemp creates a temp file in dir for the file named name, has fill
// write it, and returns its path once it is synced, closed and readable by
// all (0644). On an error nothing is left.
func WriteTemp(dir, name string, fill func(f *os.File) error) (string, error) {
	f, err := os.CreateTemp(dir, ".tmp-"+name+"-")
	if err != nil {
		return "", err
	}
	err = fill(f)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// Replace replaces path with what fill writes (mode 0644) at once: a
// reader, or a run after a crash, sees the old file or the whole new one.
// The directory is not synced (SyncDir).
func Replace(path string, fill func(f *os.File) error) error {
	tmp, err := WriteTemp(filepath.Dir(path), filepath.Base(path), fill)
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// WriteFile replaces path with data as Replace does.
func WriteFile(path string, data []byte) error {
	return Replace(path, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// Unnamed creates a file in dir (os.CreateTemp's pattern) and removes its
// name at once: scratch space that is gone when the file is closed, or
// when the process ends, however it ends.
func Unnamed(dir, pattern string) (*os.File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	return f, nil
}

// SyncDir makes the names in dir durable: those just renamed or linked
// into it.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// LockDir waits for an exclusive lock of directory dir (flock), which
// writers of related files in it share, and returns its release. Where the
// filesystem or the system has no locks (NoLocks) it returns a release
// that does nothing.
func LockDir(dir string) (unlock func(), err error) {
	d, err := OpenDir(dir)
	if err != nil {
		return nil, err
	}
	if _, err := Flock(context.Background(), d, nil); err != nil {
		d.Close()
		return nil, &os.PathError{Op: "lock", Path: dir, Err: err}
	}
	return func() { d.Close() }, nil
}

// Flock takes an exclusive flock of f, waiting for its holder until ctx
// ends (it polls: flock cannot be interrupted); waiting, if set, is called
// once when it has to wait. locked is false where the filesystem or the
// system has no locks (NoLocks): then it goes on without. The lock lasts
// until f is closed.
func Flock(ctx context.Context, f *os.File, waiting func()) (locked bool, err error) {
	for {
		err := tryLock(f)
		switch {
		case err == nil:
			return true, nil
		case NoLocks(err):
			return false, nil
		case !errors.Is(err, errLocked):
			return false, err
		}
		if waiting != nil {
			waiting()
			waiting = nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
