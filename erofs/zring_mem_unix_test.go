//go:build unix

package erofs

import (
	"runtime"
	"testing"
)

// TestRingOffHeap: the ring's memory is not the Go heap's, so it does not
// raise the GC's heap goal, and what no job touched is never resident.
func TestRingOffHeap(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := newZring(64 << 20)
	runtime.ReadMemStats(&after)
	defer r.release()
	if grew := int64(after.HeapSys) - int64(before.HeapSys); grew > 8<<20 {
		t.Errorf("a 64 MiB ring grew the heap by %d bytes", grew)
	}
	b := r.take(1 << 20)
	b[0], b[len(b)-1] = 1, 2 // the memory is usable
	r.give()
}
