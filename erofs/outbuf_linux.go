//go:build linux

package erofs

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// iovecs is the kernel's form of a batch, kept by the writer goroutine
// from one batch to the next.
type iovecs = []unix.Iovec

const havePwritev = true

// pwritev writes iov at off with one system call. unix.Pwritev makes the
// kernel's vector anew for every call, garbage on every batch; this one
// reuses vec.
func pwritev(fd int, iov [][]byte, off int64, vec *iovecs) (int, error) {
	v := (*vec)[:0]
	for _, p := range iov {
		e := unix.Iovec{Base: &p[0]}
		e.SetLen(len(p))
		v = append(v, e)
	}
	*vec = v
	lo, hi := uintptr(off), uintptr(uint64(off)>>(unix.SizeofLong*8-1)>>1)
	n, _, errno := unix.Syscall6(unix.SYS_PWRITEV, uintptr(fd), uintptr(unsafe.Pointer(&v[0])), uintptr(len(v)), lo, hi, 0)
	runtime.KeepAlive(iov)
	clear(v) // no references kept between batches
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
