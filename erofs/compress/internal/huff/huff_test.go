package huff

import (
	"container/heap"
	"math/rand/v2"
	"slices"
	"testing"
)

// optimalCost is the cost (sum of weight × length) of an optimal prefix
// code for w, by Huffman's algorithm on a heap.
func optimalCost(w []uint32) uint64 {
	h := &u64Heap{}
	for _, x := range w {
		heap.Push(h, uint64(x))
	}
	cost := uint64(0)
	for h.Len() > 1 {
		a, b := heap.Pop(h).(uint64), heap.Pop(h).(uint64)
		cost += a + b
		heap.Push(h, a+b)
	}
	return cost
}

type u64Heap []uint64

func (h u64Heap) Len() int           { return len(h) }
func (h u64Heap) Less(i, j int) bool { return h[i] < h[j] }
func (h u64Heap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *u64Heap) Push(x any)        { *h = append(*h, x.(uint64)) }
func (h *u64Heap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// TestLengths: for weights of every shape, the lengths make a complete
// code (Kraft sum 1), shorter for heavier weights, at the cost of an
// optimal code.
func TestLengths(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for iter := range 5000 {
		n := 2 + r.IntN(300)
		w := make([]uint32, n)
		for i := range w {
			switch iter % 4 {
			case 0:
				w[i] = 1 + uint32(r.IntN(1000))
			case 1: // geometric: lengths far beyond any limit
				w[i] = 1 << r.IntN(24)
			case 2: // all equal
				w[i] = 7
			default: // few distinct
				w[i] = 1 + uint32(r.IntN(3))
			}
		}
		slices.Sort(w)
		l := slices.Clone(w)
		Lengths(l)
		var kraft float64
		var cost uint64
		for i, d := range l {
			if d == 0 || d > 63 {
				t.Fatalf("n %d: length %d", n, d)
			}
			if i > 0 && d > l[i-1] {
				t.Fatalf("n %d: weight %d has a longer code (%d) than the lighter %d (%d)", n, w[i], d, w[i-1], l[i-1])
			}
			kraft += 1 / float64(uint64(1)<<d)
			cost += uint64(w[i]) * uint64(d)
		}
		if kraft != 1 {
			t.Fatalf("n %d: Kraft sum %v", n, kraft)
		}
		if want := optimalCost(w); cost != want {
			t.Fatalf("n %d: cost %d, optimum %d", n, cost, want)
		}
	}
	l := []uint32{5, 9}
	if Lengths(l); l[0] != 1 || l[1] != 1 {
		t.Errorf("two weights: lengths %v", l)
	}
}

func BenchmarkLengths(b *testing.B) {
	for _, n := range []int{19, 256, 286} {
		r := rand.New(rand.NewPCG(1, uint64(n)))
		w := make([]uint32, n)
		for i := range w {
			w[i] = 1 + uint32(r.ExpFloat64()*200)
		}
		slices.Sort(w)
		l := make([]uint32, n)
		b.Run(map[int]string{19: "codelen", 256: "literals", 286: "litlen"}[n], func(b *testing.B) {
			for b.Loop() {
				copy(l, w)
				Lengths(l)
			}
		})
	}
}
