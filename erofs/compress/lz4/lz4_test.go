package lz4

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/ocierofs/ocierofs/erofs/compress/internal/corpus"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	pierrec "github.com/pierrec/lz4/v4"
)

// The shared test inputs (erofs/compress/internal/corpus).
var (
	goSource   = corpus.GoSource
	randomData = corpus.Random
	repetitive = corpus.Repetitive
)

var (
	textOnce sync.Once
	text1M   []byte
)

func text() []byte {
	textOnce.Do(func() { text1M = goSource(1 << 20) })
	return text1M
}

type dataset struct {
	name string
	data []byte
}

func datasets() []dataset {
	return []dataset{
		{"text", text()},
		{"random", randomData(1<<20, 1)},
		{"zeros", make([]byte, 1<<20)},
		{"repetitive", repetitive(1 << 20)},
		{"mixed", append(append(append([]byte{}, text()[:100000]...), randomData(50000, 2)...), make([]byte, 30000)...)},
	}
}

// checkBlock parses an encoder's block and checks the rules the kernel's
// decoder relies on, against the consumed length.
func checkBlock(block []byte, consumed int) error {
	if len(block) == 0 {
		return errors.New("empty block")
	}
	if block[0] == 0 {
		return errors.New("first byte is zero")
	}
	si, pos := 0, 0
	lastMatch := -1
	for {
		tok := block[si]
		si++
		lits := int(tok >> 4)
		if lits == 15 {
			for {
				b := block[si]
				si++
				lits += int(b)
				if b != 255 {
					break
				}
			}
		}
		si += lits
		pos += lits
		if si == len(block) {
			if tok&15 != 0 {
				return errors.New("last sequence has a match length")
			}
			break
		}
		if si > len(block) {
			return errors.New("literals run past the block")
		}
		offset := int(block[si]) | int(block[si+1])<<8
		si += 2
		ml := int(tok & 15)
		if ml == 15 {
			for {
				b := block[si]
				si++
				ml += int(b)
				if b != 255 {
					break
				}
			}
		}
		ml += minMatch
		if offset < 1 || offset > MaxDistance || offset > pos {
			return fmt.Errorf("offset %d at %d", offset, pos)
		}
		if pos > consumed-mfLimit {
			return fmt.Errorf("match starts at %d, within the last 12 bytes of %d", pos, consumed)
		}
		lastMatch = pos
		pos += ml
		if pos > consumed-lastLiterals {
			return fmt.Errorf("match ends at %d, within the last 5 bytes of %d", pos, consumed)
		}
	}
	if pos != consumed {
		return fmt.Errorf("block decodes to %d bytes, consumed %d", pos, consumed)
	}
	_ = lastMatch
	return nil
}

// roundTrip compresses src into budget bytes and checks the block with both
// decoders and checkBlock. It returns written and consumed.
func roundTrip(t testing.TB, e *Encoder, src []byte, budget int) (int, int) {
	t.Helper()
	dst := make([]byte, budget+16)
	for i := range dst {
		dst[i] = 0xAA
	}
	w, c := e.CompressDestSize(dst[:budget], src)
	if w > budget || c > len(src) || w < 0 || c < 0 {
		t.Fatalf("level %d budget %d: written %d consumed %d of %d", e.level, budget, w, c, len(src))
	}
	for _, b := range dst[budget:] {
		if b != 0xAA {
			t.Fatalf("level %d budget %d: wrote past the budget", e.level, budget)
		}
	}
	if (w == 0) != (c == 0) {
		t.Fatalf("level %d budget %d: written %d consumed %d", e.level, budget, w, c)
	}
	if w == 0 {
		return 0, 0
	}
	block := dst[:w]
	if err := checkBlock(block, c); err != nil {
		t.Fatalf("level %d budget %d len %d: %v", e.level, budget, len(src), err)
	}
	out := make([]byte, c+64)
	n, err := Decompress(out, block)
	if err != nil || n != c || !bytes.Equal(out[:n], src[:c]) {
		t.Fatalf("level %d budget %d: decode: n %d of %d, err %v, equal %v", e.level, budget, n, c, err, bytes.Equal(out[:min(n, c)], src[:min(n, c)]))
	}
	n, err = Decompress(out[:c], block)
	if err != nil || n != c {
		t.Fatalf("level %d budget %d: exact decode: n %d of %d, err %v", e.level, budget, n, c, err)
	}
	clear(out)
	n, err = pierrec.UncompressBlock(block, out[:c])
	if err != nil || n != c || !bytes.Equal(out[:n], src[:c]) {
		t.Fatalf("level %d budget %d: pierrec decode: n %d of %d, err %v", e.level, budget, n, c, err)
	}
	return w, c
}

var testLevels = []int{0, 1, 2, 3, 4, 6, 7, 9, 10, 11, 12}

func budgets() []int {
	var b []int
	for i := 1; i <= 300; i++ {
		b = append(b, i)
	}
	return append(b, 4096, 65536, 1<<20)
}

func TestRoundTrip(t *testing.T) {
	for _, ds := range datasets() {
		for _, level := range testLevels {
			t.Run(fmt.Sprintf("%s/%d", ds.name, level), func(t *testing.T) {
				e, err := NewEncoder(level)
				if err != nil {
					t.Fatal(err)
				}
				maxGap := 0
				for i, budget := range budgets() {
					if testing.Short() && level == LevelMax && budget == 1<<20 {
						continue // the optimal parser over 1 MiB: the full tier's
					}
					// Vary the start so that small budgets see different data.
					start := (i * 7919) % (len(ds.data) / 2)
					if budget > 300 {
						start = 0
					}
					src := ds.data[start:]
					w, c := roundTrip(t, e, src, budget)
					if budget >= 2 && c < len(src) {
						if gap := budget - w; gap > maxGap {
							maxGap = gap
						}
						if w < budget-16 {
							t.Errorf("budget %d: written only %d, consumed %d of %d", budget, w, c, len(src))
						}
					}
					if ds.name == "random" && budget >= 2 {
						if want := budget - budget/255 - 16; c < want {
							t.Errorf("budget %d: random consumed %d < %d", budget, c, want)
						}
					}
				}
				t.Logf("largest gap under the budget: %d", maxGap)
			})
		}
	}
}

func TestTinyInputs(t *testing.T) {
	srcs := [][]byte{{0}, {1}, {0, 0}, []byte("abc"), []byte("aaaaaaaaaaaa"), []byte("aaaaaaaaaaaaa"),
		[]byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), bytes.Repeat([]byte("ab"), 20), make([]byte, 13), make([]byte, 17)}
	for n := 1; n <= 64; n++ {
		srcs = append(srcs, text()[1000:1000+n], randomData(n, uint64(n)), make([]byte, n), repetitive(n))
	}
	for _, level := range testLevels {
		e, _ := NewEncoder(level)
		for _, src := range srcs {
			for _, budget := range []int{1, 2, 3, 5, 8, 13, 16, 20, 30, 100} {
				w, c := roundTrip(t, e, src, budget)
				if budget >= len(src)+1+len(src)/255+1 && c != len(src) {
					t.Errorf("level %d: %d bytes in budget %d: consumed only %d (written %d)", level, len(src), budget, c, w)
				}
			}
		}
	}
}

// TestWholeInput checks that an input that fits is consumed completely and
// compresses like a plain LZ4 block.
func TestWholeInput(t *testing.T) {
	src := text()[:200000]
	for _, level := range []int{0, 1, 6, 9, 12} {
		e, _ := NewEncoder(level)
		for _, size := range []int{1000, 4096, 65536, 200000} {
			w, c := roundTrip(t, e, src[:size], 1<<20)
			if c != size {
				t.Errorf("level %d: consumed %d of %d", level, c, size)
			}
			t.Logf("level %d size %d: ratio %.3f", level, size, float64(c)/float64(w))
		}
	}
}

// TestAccessPattern feeds many blocks through one encoder, as a writer does,
// so that table entries of earlier calls are present.
func TestSequence(t *testing.T) {
	data := datasets()[4].data
	for _, level := range testLevels {
		e, _ := NewEncoder(level)
		total := 0
		for src := data; len(src) > 0; {
			_, c := roundTrip(t, e, src, 4096)
			if c == 0 {
				t.Fatal("no progress")
			}
			src = src[c:]
			total += c
		}
		if total != len(data) {
			t.Fatal(total)
		}
	}
}

// TestHistoryIndependent checks that a block does not depend on the blocks
// an encoder compressed before: EROFS writers hand blocks to any of several
// encoders, and the image must not depend on which.
func TestHistoryIndependent(t *testing.T) {
	src := datasets()[4].data
	for _, level := range testLevels {
		fresh, _ := NewEncoder(level)
		used, _ := NewEncoder(level)
		a := make([]byte, 4096)
		b := make([]byte, 4096)
		for pos := 0; pos+70000 < len(src); pos += 9973 {
			// The used encoder has just seen other data, some of it
			// the same.
			used.CompressDestSize(b, src[(pos*7)%len(src)/2:])
			wa, ca := fresh.CompressDestSize(a, src[pos:pos+70000])
			fresh, _ = NewEncoder(level)
			wb, cb := used.CompressDestSize(b, src[pos:pos+70000])
			if wa != wb || ca != cb || !bytes.Equal(a[:wa], b[:wb]) {
				t.Fatalf("level %d at %d: %d/%d fresh, %d/%d after other blocks", level, pos, wa, ca, wb, cb)
			}
		}
	}
}

func TestTableReset(t *testing.T) {
	for _, level := range []int{0, 5, 10} {
		e, _ := NewEncoder(level)
		src := text()[:100000]
		w0, c0 := roundTrip(t, e, src, 4096)
		e.off = maxBias - 50000 // next call must reset the tables
		w1, c1 := roundTrip(t, e, src, 4096)
		if e.off >= maxBias/2 {
			t.Fatalf("level %d: tables not reset, off %d", level, e.off)
		}
		if w0 != w1 || c0 != c1 {
			t.Errorf("level %d: %d/%d then %d/%d", level, w0, c0, w1, c1)
		}
	}
}

func TestMaxLiterals(t *testing.T) {
	for avail := 0; avail < 3000; avail++ {
		want := -1
		for l := 0; l < avail; l++ {
			if 1+l+extBytes(l) <= avail {
				want = l
			}
		}
		if got := maxLiterals(avail); got != want {
			t.Fatalf("maxLiterals(%d) = %d, want %d", avail, got, want)
		}
	}
}

func TestOptions(t *testing.T) {
	for _, l := range []int{-1, 13} {
		if _, err := NewEncoder(l); err == nil {
			t.Errorf("level %d accepted", l)
		}
	}
	if _, err := NewEncoder(0, WithAcceleration(0)); err == nil {
		t.Error("acceleration 0 accepted")
	}
	for l := LevelFast; l <= LevelMax; l++ {
		e, err := NewEncoder(l)
		if err != nil || e.Level() != l {
			t.Fatal(l, err)
		}
	}
	src := text()[:300000]
	prev := 0
	for _, a := range []int{1, 4, 16, 256} {
		e, _ := NewEncoder(LevelFast, WithAcceleration(a))
		w, c := roundTrip(t, e, src, 65536)
		t.Logf("acceleration %d: ratio %.3f", a, float64(c)/float64(w))
		if a > 1 && c > prev+prev/50 {
			t.Errorf("acceleration %d consumed %d, more than %d at less acceleration", a, c, prev)
		}
		prev = c
	}
}

func TestDecompressPartial(t *testing.T) {
	e, _ := NewEncoder(LevelFast)
	for _, ds := range datasets() {
		src := ds.data
		block := make([]byte, 4096)
		w, c := e.CompressDestSize(block, src)
		block = block[:w]
		out := make([]byte, c+100)
		for k := 0; k <= c; k += 1 + k/50 {
			clear(out)
			n, err := DecompressPartial(out[:k], block)
			if err != nil || n != k || !bytes.Equal(out[:k], src[:k]) {
				t.Fatalf("%s: partial %d of %d: n %d err %v", ds.name, k, c, n, err)
			}
			if out[k] != 0 {
				t.Fatalf("%s: partial %d wrote past dst", ds.name, k)
			}
			if k < c {
				if _, err := Decompress(out[:k], block); !errors.Is(err, ErrShortDst) {
					t.Fatalf("%s: Decompress into %d of %d: %v", ds.name, k, c, err)
				}
			}
		}
		n, err := DecompressPartial(out, block)
		if err != nil || n != c {
			t.Fatalf("%s: partial into a larger buffer: %d of %d, %v", ds.name, n, c, err)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		name  string
		block []byte
		err   error
	}{
		{"empty", nil, ErrCorrupt},
		{"literals past end", []byte{0x50, 'a', 'b'}, ErrCorrupt},
		{"length byte missing", []byte{0xF0}, ErrCorrupt},
		{"offset zero", []byte{0x10, 'a', 0, 0, 0x10, 'b'}, ErrCorrupt},
		{"offset before start", []byte{0x10, 'a', 2, 0, 0x10, 'b'}, ErrCorrupt},
		{"offset cut", []byte{0x10, 'a', 1}, ErrCorrupt},
		{"ends with a match", []byte{0x10, 'a', 1, 0}, ErrCorrupt},
		{"match length byte missing", []byte{0x1F, 'a', 1, 0}, ErrCorrupt},
		{"too long", []byte{0x1F, 'a', 1, 0, 255, 255, 0, 0x00}, ErrShortDst},
	}
	for _, c := range cases {
		dst := make([]byte, 100)
		if _, err := Decompress(dst, c.block); !errors.Is(err, c.err) {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
	// Valid tiny blocks.
	dst := make([]byte, 100)
	if n, err := Decompress(dst, []byte{0x00}); n != 0 || err != nil {
		t.Errorf("empty block: %d %v", n, err)
	}
	if n, err := Decompress(dst, []byte{0x1F, 'a', 1, 0, 0, 0x10, 'b'}); n != 21 || err != nil || string(dst[:n]) != strings.Repeat("a", 20)+"b" {
		t.Errorf("run: %d %v %q", n, err, dst[:n])
	}

	// Every truncation of real blocks fails or decodes to a prefix.
	for _, level := range []int{0, 9} {
		e, _ := NewEncoder(level)
		for _, ds := range datasets() {
			block := make([]byte, 2000)
			w, c := e.CompressDestSize(block, ds.data)
			block = block[:w]
			out := make([]byte, c)
			for k := 0; k < w; k++ {
				n, err := Decompress(out, block[:k])
				if err == nil && (n >= c || !bytes.Equal(out[:n], ds.data[:n])) {
					t.Fatalf("%s: prefix %d of %d decoded to %d bytes without error", ds.name, k, w, n)
				}
				DecompressPartial(out, block[:k])
			}
		}
	}
	// Garbage never panics.
	r := rand.New(rand.NewPCG(9, 9))
	out := make([]byte, 5000)
	for i := 0; i < 20000; i++ {
		g := randomData(1+r.IntN(200), uint64(i))
		Decompress(out[:r.IntN(len(out))], g)
		DecompressPartial(out[:r.IntN(len(out))], g)
	}
}

func TestZeroAllocs(t *testing.T) {
	src := text()[:300000]
	dst := make([]byte, 65536)
	for _, level := range []int{0, 3, 9, 10, 12} {
		e, _ := NewEncoder(level)
		e.CompressDestSize(dst[:4096], src)
		allocs := testing.AllocsPerRun(10, func() {
			e.CompressDestSize(dst[:4096], src)
			e.CompressDestSize(dst, src)
		})
		if allocs != 0 {
			t.Errorf("level %d: %v allocations", level, allocs)
		}
	}
	out := make([]byte, len(src))
	w, c := func() (int, int) { e, _ := NewEncoder(0); return e.CompressDestSize(dst, src) }()
	if allocs := testing.AllocsPerRun(10, func() { Decompress(out[:c], dst[:w]) }); allocs != 0 {
		t.Errorf("decoder: %v allocations", allocs)
	}
}

// TestRatios logs the ratio of each level on text in 4 KiB and 64 KiB
// budgets and checks that the levels order sensibly.
func TestRatios(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	src := text()
	for _, budget := range []int{4096, 65536} {
		var line strings.Builder
		prev := 0.0
		for l := LevelFast; l <= LevelMax; l++ {
			e, _ := NewEncoder(l)
			in, out := 0, 0
			dst := make([]byte, budget)
			for s := src; len(s) > 0; {
				w, c := e.CompressDestSize(dst, s)
				in += c
				out += w
				s = s[c:]
			}
			r := float64(in) / float64(out)
			fmt.Fprintf(&line, " %d:%.3f", l, r)
			if l > 1 && r < prev*0.995 {
				t.Errorf("budget %d: level %d ratio %.3f below level %d's %.3f", budget, l, r, l-1, prev)
			}
			prev = r
		}
		t.Logf("budget %d:%s", budget, line.String())
	}
}
