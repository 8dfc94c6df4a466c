//go:build !(amd64 || arm64 || 386 || ppc64le)

package lz4

import (
	"encoding/binary"
	"unsafe"
)

// ld8, ld16, ld32 and ld64 load little-endian words at p+i without a bounds
// check; the callers prove i >= 0 and i+1 (2, 4, 8) <= the length of the
// slice at p. This version suits any byte order and alignment rule.
func ld8(p unsafe.Pointer, i int) byte { return *(*byte)(unsafe.Add(p, i)) }
func ld16(p unsafe.Pointer, i int) uint16 {
	return binary.LittleEndian.Uint16((*[2]byte)(unsafe.Add(p, i))[:])
}
func ld32(p unsafe.Pointer, i int) uint32 {
	return binary.LittleEndian.Uint32((*[4]byte)(unsafe.Add(p, i))[:])
}
func ld64(p unsafe.Pointer, i int) uint64 {
	return binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(p, i))[:])
}
