package zstd

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/huff0"
)

// TestHuffVsHuff0: the literals sections of slices of the small-file
// corpus, coded by huffEnc, decode with huff0's decoder and are in total
// no larger than with huff0 (raw where that is smaller, as
// writeLiterals chooses).
func TestHuffVsHuff0(t *testing.T) {
	files := smallCorpus(t)
	rng := rand.New(rand.NewPCG(1, 2))
	var h huffEnc
	var s huff0.Scratch
	ours, theirs := 0, 0
	for range 3000 {
		f := files[rng.IntN(len(files))]
		if len(f) < 40 {
			continue
		}
		lits := f[:32+rng.IntN(min(len(f), 4000)-32)]
		s.Reuse = huff0.ReusePolicyNone
		var c0 []byte
		var err error
		if len(lits) < 1024 {
			c0, _, err = huff0.Compress1X(lits, &s)
		} else {
			c0, _, err = huff0.Compress4X(lits, &s)
		}
		raw := len(lits) + rawHeaderLen(len(lits))
		if err != nil {
			c0 = nil // huff0 would write them raw
		}
		hdr := 3
		switch {
		case max(len(lits), len(c0)) >= 16384:
			hdr = 5
		case max(len(lits), len(c0)) >= 1024:
			hdr = 4
		}
		if c0 == nil || len(c0)+hdr >= raw {
			theirs += raw
		} else {
			theirs += len(c0) + hdr
		}
		out := writeLiterals(nil, lits, &h)
		ours += len(out)
		if out[0]&3 == litCompressed {
			checkLiterals(t, out[litHeaderLen(out):], lits)
		}
	}
	t.Logf("literals sections: ours %d bytes, huff0 %d (%+.3f%%)", ours, theirs, 100*float64(ours-theirs)/float64(theirs))
	if ours > theirs {
		t.Errorf("ours %d bytes > huff0's %d", ours, theirs)
	}
}

// litHeaderLen is the header length of a compressed literals section.
func litHeaderLen(b []byte) int {
	return []int{3, 3, 4, 5}[b[0]>>2&3]
}

// checkLiterals decodes a Huffman literals body (table and streams) with
// huff0's decoder.
func checkLiterals(t *testing.T, body, lits []byte) {
	t.Helper()
	s, rest, err := huff0.ReadTable(body, nil)
	if err != nil {
		t.Fatalf("%d literals: table: %v", len(lits), err)
	}
	var got []byte
	if len(lits) < 1024 {
		got, err = s.Decompress1X(rest)
	} else {
		got, err = s.Decoder().Decompress4X(make([]byte, 0, len(lits)), rest)
	}
	if err != nil {
		t.Fatalf("%d literals: %v", len(lits), err)
	}
	if !bytes.Equal(got, lits) {
		t.Fatalf("%d literals decode differently", len(lits))
	}
}

// TestHuffSkewed: counts that would make codes longer than 11 bits, and
// alphabets of every size, give complete codes huff0 decodes.
func TestHuffSkewed(t *testing.T) {
	var h huffEnc
	// Fibonacci counts: an optimal code 20 bits deep.
	var lits []byte
	a, b := 1, 1
	for s := range 22 {
		for range a {
			lits = append(lits, byte(s))
		}
		a, b = b, a+b
	}
	rng := rand.New(rand.NewPCG(3, 4))
	rng.Shuffle(len(lits), func(i, j int) { lits[i], lits[j] = lits[j], lits[i] })
	for _, n := range []int{len(lits), 1023, 200} {
		out := writeLiterals(nil, lits[:n], &h)
		if out[0]&3 != litCompressed {
			t.Fatalf("skewed %d: not Huffman-coded", n)
		}
		if h.maxBits > huffMaxBits {
			t.Fatalf("skewed %d: %d-bit codes", n, h.maxBits)
		}
		checkLiterals(t, out[litHeaderLen(out):], lits[:n])
	}
	for alpha := 2; alpha <= 256; alpha += 17 {
		for _, n := range []int{64, 700, 3000} {
			lits := make([]byte, n)
			for i := range lits {
				// Geometric-ish: small symbols common.
				lits[i] = byte(rng.IntN(1 + rng.IntN(alpha)))
			}
			out := writeLiterals(nil, lits, &h)
			if out[0]&3 != litCompressed {
				continue
			}
			checkLiterals(t, out[litHeaderLen(out):], lits)
		}
	}
}
