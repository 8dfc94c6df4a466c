package deflate

import (
	"bytes"
	stdflate "compress/flate"
	"errors"
	"fmt"
	shared "github.com/ocierofs/ocierofs/erofs/compress/internal/corpus"
	"io"
	"slices"
	"sync"
	"testing"
)

// The shared test inputs (erofs/compress/internal/corpus).
var (
	goSource    = shared.GoSource
	randomBytes = shared.Random
)

var (
	corpusOnce sync.Once
	corpus     map[string][]byte
)

// testInputs are inputs of different kinds: text, random, zeros, short
// periods, text with random holes, skewed byte distributions.
func testInputs() map[string][]byte {
	corpusOnce.Do(func() {
		text := goSource(3 << 20)
		mixed := slices.Clone(text[:1<<20])
		for off := 5000; off+9000 < len(mixed); off += 50000 {
			copy(mixed[off:], randomBytes(9000, uint64(off)))
		}
		skew := randomBytes(1<<20, 3)
		for i := range skew {
			skew[i] &= 0x0f // 4 bits of entropy per byte: Huffman only
		}
		corpus = map[string][]byte{
			"text":   text,
			"random": randomBytes(2<<20, 1),
			"zeros":  make([]byte, 3<<20),
			"abc":    bytes.Repeat([]byte("abcabcabd"), 400000),
			"mixed":  mixed,
			"skew":   skew,
			"tiny":   []byte("hello, hello, hello world"),
		}
	})
	return corpus
}

// check verifies one CompressDestSize result against the contract and
// against Go's own inflater.
func check(t testing.TB, dst, src []byte, w, c int) {
	t.Helper()
	if w > len(dst) || c > len(src) || w < 0 || c < 0 {
		t.Fatalf("written %d of %d, consumed %d of %d", w, len(dst), c, len(src))
	}
	if c == 0 {
		if w != 0 {
			t.Fatalf("consumed nothing but wrote %d bytes", w)
		}
		return
	}
	if dst[0] == 0 {
		t.Fatalf("first byte is zero")
	}
	out := make([]byte, c)
	if err := Decompress(out, dst[:w]); err != nil {
		t.Fatalf("Decompress (%d → %d bytes): %v", w, c, err)
	}
	if !bytes.Equal(out, src[:c]) {
		t.Fatalf("decoded %d bytes differ from the input at %d", c, firstDiff(out, src))
	}
	std, err := io.ReadAll(stdflate.NewReader(bytes.NewReader(dst[:w])))
	if err != nil || !bytes.Equal(std, src[:c]) {
		t.Fatalf("compress/flate reads %d bytes (want %d), err %v", len(std), c, err)
	}
	// The stream ends in its last byte: nothing written is wasted.
	if c > 1 && Decompress(out[:c-1], dst[:w]) == nil {
		t.Fatalf("stream also decodes to a shorter output")
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestRoundTrip(t *testing.T) {
	in := testInputs()
	for _, name := range []string{"text", "random", "zeros", "abc", "mixed", "skew", "tiny"} {
		for _, level := range []int{1, 3, 4, 6, 9} {
			for _, budget := range []int{4096, 16384, 65536, 1 << 20} {
				if level == 9 && budget == 1<<20 && testing.Short() {
					continue
				}
				t.Run(fmt.Sprintf("%s/L%d/%dK", name, level, budget>>10), func(t *testing.T) {
					e, err := NewEncoder(level)
					if err != nil {
						t.Fatal(err)
					}
					src := in[name]
					dst := make([]byte, budget)
					total, pieces, inBytes := 0, 0, 0
					for len(src) > 0 && pieces < 8 {
						w, c := e.CompressDestSize(dst, src)
						check(t, dst, src, w, c)
						if c == 0 {
							t.Fatalf("nothing fits in %d bytes", budget)
						}
						if c < len(src) && w < budget-(budget>>6)-16 {
							t.Errorf("stopped at %d of %d bytes with %d of input left", w, budget, len(src)-c)
						}
						total += w
						inBytes += c
						pieces++
						src = src[c:]
					}
					if e.fallbacks != 0 {
						t.Errorf("%d streams overran the budget in the bit accounting", e.fallbacks)
					}
					t.Logf("%d pieces, ratio %.3f", pieces, float64(inBytes)/float64(total))
				})
			}
		}
	}
}

// TestTinyBudgets covers budgets from nothing to a few bytes: the encoder
// must fit or give up, never overrun.
func TestTinyBudgets(t *testing.T) {
	in := testInputs()
	for _, level := range []int{1, 6} {
		e, _ := NewEncoder(level)
		for _, name := range []string{"text", "random", "zeros", "tiny"} {
			for budget := 0; budget < 80; budget++ {
				dst := make([]byte, budget)
				src := in[name][:min(len(in[name]), 3000)]
				w, c := e.CompressDestSize(dst, src)
				check(t, dst, src, w, c)
				if budget >= 8 && c == 0 {
					t.Errorf("%s L%d: nothing fits in %d bytes", name, level, budget)
				}
				if e.fallbacks != 0 {
					t.Fatalf("%s L%d, %d bytes: the bit accounting overran the budget", name, level, budget)
				}
			}
		}
	}
}

func TestDeterministic(t *testing.T) {
	text := testInputs()["text"]
	e1, _ := NewEncoder(6)
	d1, d2 := make([]byte, 4096), make([]byte, 4096)
	// e1 has history of other calls; e2 is fresh for every piece.
	for off := 0; off < 200000; off += 7919 {
		e1.CompressDestSize(d1, text[off+100:])
		w1, c1 := e1.CompressDestSize(d1, text[off:])
		e2, _ := NewEncoder(6)
		w2, c2 := e2.CompressDestSize(d2, text[off:])
		if w1 != w2 || c1 != c2 || !bytes.Equal(d1[:w1], d2[:w2]) {
			t.Fatalf("at %d: reused encoder %d/%d, fresh %d/%d", off, w1, c1, w2, c2)
		}
	}
}

func TestNoAllocations(t *testing.T) {
	text := testInputs()["text"]
	e, _ := NewEncoder(6)
	dst := make([]byte, 65536)
	e.CompressDestSize(dst, text)
	e.CompressDestSize(dst[:4096], text)
	n := testing.AllocsPerRun(10, func() {
		e.CompressDestSize(dst, text[1000:])
		e.CompressDestSize(dst[:4096], text[5000:])
	})
	if n != 0 {
		t.Errorf("%v allocations per call pair", n)
	}
	w, c := e.CompressDestSize(dst, text)
	out := make([]byte, c)
	Decompress(out, dst[:w])
	if n := testing.AllocsPerRun(10, func() { Decompress(out, dst[:w]) }); n != 0 {
		t.Errorf("Decompress: %v allocations per call", n)
	}
}

func TestLevels(t *testing.T) {
	for _, l := range []int{0, 10, -1} {
		if _, err := NewEncoder(l); err == nil {
			t.Errorf("level %d accepted", l)
		}
	}
	if _, err := NewEncoder(6, WithBlockTokens(10)); err == nil {
		t.Errorf("block of 10 tokens accepted")
	}
}

// TestRatioByLevel checks that higher levels do not compress worse.
func TestRatioByLevel(t *testing.T) {
	src := testInputs()["text"][:1<<20]
	prev := 0.0
	for level := LevelMin; level <= LevelMax; level++ {
		e, _ := NewEncoder(level)
		dst := make([]byte, 4096)
		in, out := 0, 0
		for s := src; len(s) > 0; {
			w, c := e.CompressDestSize(dst, s)
			in, out, s = in+c, out+w, s[c:]
		}
		r := float64(in) / float64(out)
		t.Logf("level %d: ratio %.3f", level, r)
		if r < prev*0.995 {
			t.Errorf("level %d ratio %.3f below level %d's %.3f", level, r, level-1, prev)
		}
		prev = r
	}
}

func TestDecompressErrors(t *testing.T) {
	text := testInputs()["text"]
	e, _ := NewEncoder(6)
	dst := make([]byte, 4096)
	w, c := e.CompressDestSize(dst, text)
	out := make([]byte, c+1)
	if err := Decompress(out, dst[:w]); !errors.Is(err, ErrShortStream) {
		t.Errorf("output one byte larger: %v", err)
	}
	if err := Decompress(out[:c-1], dst[:w]); !errors.Is(err, ErrLongStream) {
		t.Errorf("output one byte smaller: %v", err)
	}
	if err := Decompress(out[:c], dst[:w-1]); err == nil {
		t.Errorf("truncated stream accepted")
	}
	if err := Decompress(out[:c], nil); err == nil {
		t.Errorf("empty stream accepted")
	}
	// A non-final stored block first: its zero first byte gets bit 3.
	for i := range dst {
		dst[i] = 0
	}
	if err := Decompress(out[:0], []byte{0x08, 0, 0, 0xff, 0xff, 3, 0, 2}); err != nil {
		t.Errorf("stored block with padding bit 3: %v", err)
	}
}
