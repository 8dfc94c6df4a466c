//go:build unix

package erofs

import "syscall"

// ringMemory returns n bytes for a ring, mapped outside the Go heap, and
// the function that unmaps them. The GC sizes its heap goal by what the
// heap holds: a ring in it, a segment per worker and never garbage, would
// raise that goal by a fraction of its size for nothing. Out of the heap,
// the ring costs only the pages the jobs touch.
func ringMemory(n int) ([]byte, func()) {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return make([]byte, n), func() {}
	}
	return b, func() { syscall.Munmap(b) }
}
