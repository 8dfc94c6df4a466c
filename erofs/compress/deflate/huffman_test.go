package deflate

import (
	"container/heap"
	"math/rand/v2"
	"testing"
)

// refCost is the cost of an unlimited optimal Huffman code (sum of the
// merged weights), computed with a heap.
func refCost(freq []uint32) int {
	var h intHeap
	for _, f := range freq {
		if f > 0 {
			h = append(h, int(f))
		}
	}
	heap.Init(&h)
	cost := 0
	for h.Len() > 1 {
		a, b := heap.Pop(&h).(int), heap.Pop(&h).(int)
		cost += a + b
		heap.Push(&h, a+b)
	}
	return cost
}

type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func TestHuffman(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 5))
	var h huffman
	for iter := range 3000 {
		n := 2 + r.IntN(numLitLen-1)
		limit := []int{maxBits, maxCLBits, 9}[iter%3]
		if limit == maxCLBits {
			n = min(n, numCodeLen)
		}
		freq := make([]uint32, n)
		used := 0
		for i := range freq {
			switch r.IntN(4) {
			case 0: // unused
			case 1: // geometric: long codes, forces the limit
				freq[i] = 1 << r.IntN(20)
			default:
				freq[i] = uint32(r.IntN(1000))
			}
			if freq[i] > 0 {
				used++
			}
		}
		lengths := make([]uint8, n)
		h.build(freq, lengths, limit)
		kraft, cost := 0, 0
		for s, l := range lengths {
			if int(l) > limit {
				t.Fatalf("length %d over the limit %d", l, limit)
			}
			if freq[s] > 0 && l == 0 {
				t.Fatalf("used symbol %d has no code", s)
			}
			if l > 0 {
				kraft += 1 << (maxBits - l)
				cost += int(freq[s]) * int(l)
			}
		}
		if kraft != 1<<maxBits {
			t.Fatalf("incomplete or oversubscribed code: Kraft sum %d/%d (used %d)", kraft, 1<<maxBits, used)
		}
		ref := refCost(freq)
		if used >= 2 && cost < ref {
			t.Fatalf("cost %d below the optimum %d", cost, ref)
		}
		longest := 0
		for _, l := range lengths {
			longest = max(longest, int(l))
		}
		if used >= 2 && longest < limit && cost != ref {
			t.Fatalf("unlimited code costs %d, optimum %d", cost, ref)
		}
	}
}

// TestCanonical checks the fixed code against RFC 1951 §3.2.6.
func TestCanonical(t *testing.T) {
	rev := func(c uint16, n int) uint16 {
		var r uint16
		for range n {
			r = r<<1 | c&1
			c >>= 1
		}
		return r
	}
	for _, tc := range []struct{ sym, code int }{{0, 0x30}, {143, 0xbf}, {144, 0x190}, {255, 0x1ff}, {256, 0}, {279, 0x17}, {280, 0xc0}, {287, 0xc7}} {
		n := int(fixedLitLen[tc.sym])
		if got := rev(fixedLit[tc.sym], n); int(got) != tc.code {
			t.Errorf("fixed code of %d: %#x, want %#x", tc.sym, got, tc.code)
		}
	}
	for l := 3; l <= 258; l++ {
		s := lenSym[l-3]
		if base := int(lenBase[s]) + 3; l < base || l-base >= 1<<lenExtra[l-3] {
			t.Errorf("length %d: symbol %d base %d extra %d", l, 257+int(s), base, lenExtra[l-3])
		}
	}
	if lenSym[258-3] != 28 || lenExtra[258-3] != 0 || lenSym[257-3] != 27 {
		t.Errorf("lengths 257/258 map to %d/%d", lenSym[254], lenSym[255])
	}
	for d := uint32(0); d < windowSize; d++ {
		s, x := distSym(d)
		if d < uint32(distBase[s]) || d-uint32(distBase[s]) >= 1<<x || x != uint32(distExtra[s]) {
			t.Fatalf("distance %d: symbol %d base %d extra %d", d+1, s, distBase[s]+1, x)
		}
	}
}
