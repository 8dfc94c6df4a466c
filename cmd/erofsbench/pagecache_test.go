package main

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWarmInput drops a file from the page cache and checks that warmInput
// says so and brings all of it back.
func TestWarmInput(t *testing.T) {
	name := filepath.Join(t.TempDir(), "in.tar")
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(name, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	// Clean pages go with DONTNEED, except on file systems that keep every
	// page (tmpfs): there the first figure cannot be checked.
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil {
		t.Fatal(err)
	}
	before, err := warmInput(name)
	if err != nil {
		t.Fatal(err)
	}
	if fs.Type != unix.TMPFS_MAGIC && before > 0.5 {
		t.Errorf("after FADV_DONTNEED, %.0f%% of the file was said to be cached", before*100)
	}
	after, err := residentFraction(name)
	if err != nil {
		t.Fatal(err)
	}
	if after != 1 {
		t.Errorf("after warmInput, %.0f%% of the file is cached, want all", after*100)
	}
	t.Logf("cached before: %.0f%%, after: %.0f%%", before*100, after*100)

	if frac, err := warmInput(t.TempDir()); err != nil || frac != -1 {
		t.Errorf("warmInput(a tree) = %v, %v; want -1 (not measured), nil", frac, err)
	}
}
