// Package atomicfile writes files that appear whole or not at all: into a
// temp file beside the target (".tmp-NAME-*", which a sweep of a killed
// run's leftovers can match), synced, then renamed or linked into place.
// OCI layouts (their blobs and index.json) and the layer content cache
// (entries, sidecars, lower records) are written with it.
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
