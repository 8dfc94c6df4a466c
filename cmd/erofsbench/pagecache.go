package main

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Every build reads its input from the page cache: warmInput reads it again
// before each one. Reading it once per dataset was not enough: some hosts
// page out file pages that go unread for a while even with memory to spare
// (DAMON's reclaim, for one, takes pages idle for about a minute; a build
// that then reads its input from disk is much slower). Between two reads of
// the Linux tree's tar in the lzma cells go minutes of other builds.

// warmInput reads in (a file or a tree) and returns the fraction of its pages
// that were in the page cache before, or -1 if that is not known (a tree, or
// no mincore).
func warmInput(in string) (float64, error) {
	frac := -1.0
	if st, err := os.Stat(in); err == nil && st.Mode().IsRegular() {
		if f, err := residentFraction(in); err == nil {
			frac = f
		}
	}
	return frac, warm(in)
}

// residentFraction is the fraction of the file's pages in the page cache.
func residentFraction(name string) (float64, error) {
	f, err := os.Open(name)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Size() == 0 {
		return 1, nil
	}
	// Mapped, not touched: mincore reads the page cache, not the mapping.
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, err
	}
	defer unix.Munmap(m)
	page := os.Getpagesize()
	vec := make([]byte, (len(m)+page-1)/page)
	// x/sys has no wrapper for mincore(2).
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		return 0, e
	}
	in := 0
	for _, v := range vec {
		in += int(v & 1)
	}
	return float64(in) / float64(len(vec)), nil
}

// warm reads the input once, a file or every regular file of a tree.
func warm(in string) error {
	buf := make([]byte, 1<<20)
	readAll := func(p string) error {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
		return err
	}
	st, err := os.Stat(in)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return readAll(in)
	}
	return filepath.WalkDir(in, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		return readAll(p)
	})
}
