package convert

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// A Converter keeps its converted layers in a temp directory of its own,
// which it holds an flock on while it lives: the kernel lets go of the
// lock when the process ends, however it ends. A run killed with SIGKILL
// leaves its directory behind (gigabytes, for big layers); the next
// Converter made in the same parent directory removes every such
// directory whose lock nobody holds (made over a minute ago: one just made
// may not be locked yet).

// tempPrefix names the temp directories of Converters; tempLock is the
// file in each that carries the lock.
const (
	tempPrefix = "ocierofs-"
	tempLock   = ".ocierofs-lock"
)

// makeTemp makes and locks a temp directory in parent, after removing the
// abandoned ones there. The returned file holds the lock until closed.
func makeTemp(parent string) (string, *os.File, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	sweepTemp(parent)
	dir, err := os.MkdirTemp(parent, tempPrefix)
	if err != nil {
		return "", nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, tempLock), os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, f, nil
}

// sweepTemp removes the temp directories in parent that a Converter made
// and no process holds any more. Directories without the lock file are
// someone else's, and left alone.
func sweepTemp(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		// A directory just made may not be locked yet by its maker.
		if fi, err := os.Stat(filepath.Join(dir, tempLock)); err != nil || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, tempLock), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			os.RemoveAll(dir) // abandoned: its process is gone
		}
		f.Close()
	}
}
