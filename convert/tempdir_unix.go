//go:build unix

package convert

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert/internal/outfile"
	"github.com/ocierofs/ocierofs/internal/atomicfile"
)

// makeTemp makes and locks a temp directory in parent, after removing the
// abandoned ones there. The returned file holds the lock until closed; it
// is nil where the filesystem has no flock (the directory is then never
// swept).
func makeTemp(parent string) (string, *os.File, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	sweepTemp(parent)
	dir, err := os.MkdirTemp(parent, tempPrefix)
	if err != nil {
		return "", nil, err
	}
	if f := lockedUnnamed(dir); f != nil {
		return dir, f, nil
	}
	f, err := os.OpenFile(filepath.Join(dir, tempLock), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if atomicfile.NoLocks(err) {
			// A filesystem without locks: without the lock file, no
			// sweep takes the directory for abandoned.
			os.Remove(filepath.Join(dir, tempLock))
			return dir, nil, nil
		}
		os.RemoveAll(dir)
		return "", nil, err
	}
	return dir, f, nil
}

// lockedUnnamed makes dir's lock file locked before it has a name
// (tempHeld), or returns nil where the filesystem cannot.
func lockedUnnamed(dir string) *os.File {
	f, unnamed, err := outfile.CreateUnnamed(dir, tempHeld)
	if err != nil {
		return nil
	}
	if !unnamed {
		f.Close()
		os.Remove(f.Name())
		return nil
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil || outfile.LinkUnnamed(f, filepath.Join(dir, tempHeld)) != nil {
		f.Close()
		return nil
	}
	return f
}

// sweepTemp removes the temp directories in parent that a Converter made
// and no process holds any more. Directories without a lock file are
// someone else's (or one just being made), and left alone.
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
		// Only this user's: in a shared $TMPDIR another user may plant
		// a directory of that name.
		var st unix.Stat_t
		if unix.Lstat(dir, &st) != nil || int(st.Uid) != os.Geteuid() {
			continue
		}
		lock := filepath.Join(dir, tempHeld)
		if _, err := os.Lstat(lock); err != nil {
			// Made, then locked: one just made may not be locked yet.
			lock = filepath.Join(dir, tempLock)
			if fi, err := os.Lstat(lock); err != nil || time.Since(fi.ModTime()) < time.Minute {
				continue
			}
		}
		// Not through a symbolic link (root would open what it names,
		// read-write), and never blocking on a FIFO.
		fd, err := unix.Open(lock, unix.O_RDWR|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		f := os.NewFile(uintptr(fd), lock)
		if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
			f.Close()
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			os.RemoveAll(dir) // abandoned: its process is gone
		}
		f.Close()
	}
}
