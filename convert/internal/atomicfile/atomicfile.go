// Package atomicfile writes files that appear whole or not at all: into a
// temp file beside the target (".tmp-NAME-*", which a sweep of a killed
// run's leftovers can match), synced, then renamed or linked into place.
package atomicfile

import (
	"os"
	"path/filepath"
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

// WriteFile replaces path with data (mode 0644) at once: a reader sees
// the old file or the new one, never part of it. The directory is not
// synced.
func WriteFile(path string, data []byte) error {
	tmp, err := WriteTemp(filepath.Dir(path), filepath.Base(path), func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
