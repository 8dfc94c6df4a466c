//go:build amd64 || arm64 || 386 || ppc64le

package lz4

import "unsafe"

// ld8, ld16, ld32 and ld64 load little-endian words at p+i without a bounds
// check; the callers prove i >= 0 and i+1 (2, 4, 8) <= the length of the
// slice at p. On these little-endian machines, which load unaligned words
// at full speed, a plain load is the shortest code (binary.LittleEndian's
// byte assembly compiles to the same load, plus inlining marks in the hot
// loops).
func ld8(p unsafe.Pointer, i int) byte    { return *(*byte)(unsafe.Add(p, i)) }
func ld16(p unsafe.Pointer, i int) uint16 { return *(*uint16)(unsafe.Add(p, i)) }
func ld32(p unsafe.Pointer, i int) uint32 { return *(*uint32)(unsafe.Add(p, i)) }
func ld64(p unsafe.Pointer, i int) uint64 { return *(*uint64)(unsafe.Add(p, i)) }
