//go:build !unix

package erofs

// ringMemory returns n bytes for a ring from the Go heap.
func ringMemory(n int) ([]byte, func()) { return make([]byte, n), func() {} }
