package erofs

import (
	"math/rand/v2"
	"testing"
)

// TestZring takes and gives back buffers of random sizes in FIFO order, the
// way the pipeline does, and checks that buffers in use never overlap,
// keep their contents, and that a buffer always fits once the ring is empty.
func TestZring(t *testing.T) {
	const size = 1 << 12
	r := newZring(size)
	rnd := rand.New(rand.NewPCG(1, 2))
	type live struct {
		b   []byte
		tag byte
	}
	var q []live
	var tag byte
	taken, wrapped := 0, 0
	for i := 0; i < 200000; i++ {
		if len(q) > 0 && (rnd.IntN(3) == 0 || len(q) > 40) {
			for _, c := range q[0].b {
				if c != q[0].tag {
					t.Fatalf("step %d: a buffer in use was overwritten", i)
				}
			}
			q = q[1:]
			r.give()
			continue
		}
		n := 1 + rnd.IntN(size/3)
		if rnd.IntN(10) == 0 {
			n = size // a whole segment
		}
		b := r.take(n)
		if b == nil {
			if len(q) == 0 {
				t.Fatalf("step %d: no room for %d bytes in an empty ring", i, n)
			}
			continue
		}
		if len(b) != n || cap(b) != n {
			t.Fatalf("step %d: took %d bytes (cap %d), want %d", i, len(b), cap(b), n)
		}
		if &b[0] == &r.buf[0] && len(q) > 0 {
			wrapped++
		}
		tag++
		for k := range b {
			b[k] = tag
		}
		q = append(q, live{b, tag})
		taken++
		if r.inUse() != len(q) {
			t.Fatalf("step %d: %d buffers in use, want %d", i, r.inUse(), len(q))
		}
	}
	if taken < 10000 || wrapped < 100 {
		t.Errorf("the test took %d buffers and wrapped %d times: too few to mean anything", taken, wrapped)
	}
	if len(r.ends) > 200 {
		t.Errorf("the list of buffers in use has %d entries for at most 41 in use: it is not compacted", len(r.ends))
	}
}
