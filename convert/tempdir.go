package convert

import "os"

// A Converter keeps its converted layers in a temp directory of its own,
// which it holds an flock on while it lives: the kernel lets go of the
// lock when the process ends, however it ends. A run killed with SIGKILL
// leaves its directory behind (gigabytes, for big layers); the next
// Converter made in the same parent directory removes every such
// directory whose lock nobody holds. The lock file is made unnamed
// (O_TMPFILE), locked, and only then linked in (tempHeld), so a lock file
// that can be locked is abandoned at any age. Where that cannot be done,
// the file is made, then locked (tempLock): one less than a minute old may
// not be locked yet, and is left for a later sweep. Without flock (not a
// Unix system), no directory is locked or swept.

// tempPrefix names the temp directories of Converters; tempHeld and
// tempLock are the files in each that carry the lock.
const (
	tempPrefix = "ocierofs-"
	tempHeld   = ".ocierofs-held"
	tempLock   = ".ocierofs-lock"
)

// TempDir makes a temp directory in parent (default $TMPDIR) as a
// Converter does: locked while the process lives, and removed by a later
// one if the process is killed. release removes it.
func TempDir(parent string) (dir string, release func(), err error) {
	dir, lock, err := makeTemp(parent)
	if err != nil {
		return "", nil, err
	}
	return dir, func() {
		os.RemoveAll(dir)
		if lock != nil {
			lock.Close()
		}
	}, nil
}
