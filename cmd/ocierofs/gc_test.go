package main

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestTuneGC: the GC percent stays Go's while the live heap is below the
// limit and changes once it is above.
func TestTuneGC(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tuneGC(64<<20, 23)
	for range 5 {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	if p := debug.SetGCPercent(100); p != 100 {
		t.Fatalf("GC percent %d with a small heap, want 100", p)
	}
	live := make([]byte, 80<<20)
	for i := range live {
		live[i] = byte(i)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		time.Sleep(time.Millisecond)
		p := debug.SetGCPercent(100)
		if p == 23 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GC percent %d with %d MiB live, want 23", p, len(live)>>20)
		}
	}
	runtime.KeepAlive(live)
}
