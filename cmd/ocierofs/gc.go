package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// An image build keeps a record per entry until Finish: a heap of
// long-lived data in which a collection finds little to free, and little
// garbage is made per entry (no buffer per file). Once that heap is big,
// collecting at 25% growth instead of Go's 100% keeps the peak RSS of the
// Linux tree within 1.25x its live heap (deflate, one worker: 48.9 -> 46.9
// MiB against 50%) for about 2% more CPU time.
//
// While the heap is small, 25% costs more than it saves: its goal has a
// floor of 1 MiB instead of 4, so a build collects four times in its first
// 100 ms, and each collection touches memory of its own. Go's 100% there
// took src256 none, two workers, from 0.135 to 0.127 s and 11.6 to 10.4
// MiB, and src256 deflate from 17.5 to 16.9 MiB.
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
