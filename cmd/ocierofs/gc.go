package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// An image build keeps a record per entry until Finish: a heap of
// long-lived data in which a collection finds little to free, and little
// garbage is made per entry (no buffer per file). Once that heap is big,
// collecting at 25% growth instead of Go's 100% keeps the peak RSS close
// to the live heap for a little more CPU time.
//
// While the heap is small, 25% costs more than it saves: the heap goal's
// floor falls to a quarter, so a build collects several times as it
// starts, and each collection touches memory of its own. Go's 100% there
// saves both time and peak RSS on small builds (docs/performance.md,
// memory, has the figures).
const (
	bigHeapGCPercent = 25
	bigHeap          = 4 << 20 // live bytes
)

// tuneGC leaves Go's GC percent in place until the live heap reaches
// limit bytes, then sets percent. It watches the heap once per collection,
// with a cleanup on an object that each collection frees.
func tuneGC(limit uint64, percent int) {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var arm func()
	arm = func() {
		runtime.AddCleanup(new([64]byte), func(struct{}) {
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 && sample[0].Value.Uint64() >= limit {
				debug.SetGCPercent(percent)
				return
			}
			arm()
		}, struct{}{})
	}
	arm()
}
