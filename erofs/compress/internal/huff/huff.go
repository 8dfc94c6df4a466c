// Package huff computes the code lengths of a Huffman code for the
// encoders that need one (deflate's blocks, zstd's literals). Each encoder
// sorts its counts, limits the lengths and assigns the codes as its
// format wants; the lengths of the optimal code are the part they share.
//
//	slices.Sort(w) // the counts of the symbols in use, at least two
//	huff.Lengths(w) // w[i] is now the code length of the i-th lightest
package huff

// Lengths turns weights sorted in increasing order into the code lengths
// of an optimal prefix code for them, in place: w[0], the lightest, gets
// the longest. w must hold at least two weights whose sum fits a uint32.
//
// It is Moffat and Katajainen's in-place method ("In-place calculation of
// minimum-redundancy codes", 1995), which needs no heap and no memory
// beyond w: phase 1 merges the two lightest of the leaves and the internal
// nodes made so far, the leaves in w's order and the internal nodes in the
// order they are made, leaving in w[t] the parent of internal node t;
// phase 2 turns parents into depths, phase 3 internal depths into leaf
// depths. On equal weights the leaf is merged first: the lengths, and so
// the encoders' output bytes, depend on it.
func Lengths(w []uint32) {
	n := len(w)
	// Phase 1. The first node is always the two lightest leaves.
	w[0] += w[1]
	root, leaf := 0, 2
	for t := 1; t < n-1; t++ {
		// Here root < t: node t-1 was made last and is merged only later.
		if leaf >= n || w[root] < w[leaf] {
			w[t] = w[root]
			w[root] = uint32(t)
			root++
		} else {
			w[t] = w[leaf]
			leaf++
		}
		if leaf >= n || root < t && w[root] < w[leaf] {
			w[t] += w[root]
			w[root] = uint32(t)
			root++
		} else {
			w[t] += w[leaf]
			leaf++
		}
	}
	// Phase 2: the depth of each internal node, the root (n-2) at 0.
	w[n-2] = 0
	for t := n - 3; t >= 0; t-- {
		w[t] = w[w[t]] + 1
	}
	// Phase 3: at each depth, the nodes there that are not internal are
	// leaves; they are written from the end, shallowest first.
	avail, used, depth := 1, 0, uint32(0)
	t, x := n-2, n-1
	for avail > 0 {
		for t >= 0 && w[t] == depth {
			used++
			t--
		}
		for avail > used {
			w[x] = depth
			x--
			avail--
		}
		avail, used = 2*used, 0
		depth++
	}
}
