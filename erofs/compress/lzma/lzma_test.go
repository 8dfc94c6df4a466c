package lzma

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/ocierofs/ocierofs/erofs/compress/internal/corpus"
	"os/exec"
	"sync"
	"testing"
)

// The shared test inputs (erofs/compress/internal/corpus).
var (
	goSource   = corpus.GoSource
	randomData = corpus.Random
	repetitive = corpus.Repetitive
)

var (
	textOnce sync.Once
	text4M   []byte
)

func text() []byte {
	textOnce.Do(func() { text4M = goSource(4 << 20) })
	return text4M
}

func corpora() map[string][]byte {
	mixed := append([]byte(nil), text()[:1<<20]...)
	for off := 0; off+3000 < len(mixed); off += 50000 {
		copy(mixed[off:], randomData(3000, uint64(off)))
	}
	return map[string][]byte{
		"text":       text()[:2<<20],
		"random":     randomData(1<<20, 1),
		"zeros":      make([]byte, 3<<20),
		"repetitive": repetitive(1 << 20),
		"mixed":      mixed,
		"tiny":       []byte("a"),
		"short":      []byte("hello, hello, hello world"),
	}
}

// check compresses src into budget bytes, decodes the result and verifies
// the contract; it returns written and consumed.
func check(t *testing.T, e *Encoder, d *Decoder, src []byte, budget int) (int, int) {
	t.Helper()
	dst := make([]byte, budget+16)
	for i := range dst {
		dst[i] = 0xEE
	}
	w, c := e.CompressDestSize(dst[:budget], src)
	if w > budget {
		t.Fatalf("budget %d: wrote %d", budget, w)
	}
	if !bytes.Equal(dst[budget:], bytes.Repeat([]byte{0xEE}, 16)) {
		t.Fatalf("budget %d: wrote past the budget", budget)
	}
	if c == 0 {
		if len(src) > 0 && budget >= 64 {
			t.Fatalf("budget %d: nothing consumed of %d bytes", budget, len(src))
		}
		return w, c
	}
	if dst[0] != 0xA2 {
		t.Fatalf("first byte %#x, want 0xA2", dst[0])
	}
	out := make([]byte, c)
	if err := d.Decode(out, dst[:w]); err != nil {
		t.Fatalf("budget %d: decode %d bytes from %d: %v", budget, c, w, err)
	}
	if !bytes.Equal(out, src[:c]) {
		t.Fatalf("budget %d: decoded bytes differ from the input", budget)
	}
	return w, c
}

func TestRoundTrip(t *testing.T) {
	levels := []int{0, 1, 3, 4, 6, 9}
	if testing.Short() {
		// Each parser with a short and the longest nice length (0, 3), the
		// optimal parser's first level and the default (4, 6), on at most
		// 1 MiB of each input.
		levels = []int{0, 3, 4, 6}
	}
	for name, data := range corpora() {
		if testing.Short() {
			data = data[:min(len(data), 1<<20)]
		}
		for _, level := range levels {
			t.Run(fmt.Sprintf("%s/L%d", name, level), func(t *testing.T) {
				e, err := NewEncoder(level, WithDictSize(64<<10))
				if err != nil {
					t.Fatal(err)
				}
				d, _ := NewDecoder(e.DictSize())
				for _, budget := range []int{4096, 16384, 65536, 1 << 20} {
					src := data
					// Cut the whole input into pclusters, as EROFS does.
					for len(src) > 0 {
						w, c := check(t, e, d, src, budget)
						if c < len(src) && w < budget-maxSymbolBytes && !e.incompressible(c) {
							t.Fatalf("budget %d: stopped at %d of %d bytes with %d bytes written", budget, c, len(src), w)
						}
						src = src[c:]
						if budget >= 65536 {
							break // big budgets: one call is enough
						}
					}
				}
			})
		}
	}
}

// TestFillsBudget: on compressible text the stream ends within a symbol of
// the budget, for every budget size.
func TestFillsBudget(t *testing.T) {
	e, _ := NewEncoder(1)
	d, _ := NewDecoder(e.DictSize())
	src := text()
	for budget := 6; budget < 5000; budget += 97 {
		w, c := check(t, e, d, src, budget)
		if c == 0 {
			t.Fatalf("budget %d: nothing fits", budget)
		}
		if budget-w > maxSymbolBytes {
			t.Errorf("budget %d: only %d bytes written", budget, w)
		}
	}
}

// TestDictSize: no match reaches further back than the dictionary; a
// decoder with a smaller dictionary refuses the stream.
func TestDictSize(t *testing.T) {
	// Two copies of a text block 40 KiB apart: only a dictionary of more
	// than 40 KiB sees the repetition.
	blk := text()[3<<20 : 3<<20+40<<10]
	src := append(append([]byte(nil), blk...), blk...)
	var sizes []int
	for _, dict := range []int{4096, 32 << 10, 64 << 10} {
		e, err := NewEncoder(1, WithDictSize(dict))
		if err != nil {
			t.Fatal(err)
		}
		d, _ := NewDecoder(dict)
		w, c := check(t, e, d, src, 1<<20)
		if c != len(src) {
			t.Fatalf("dict %d: consumed %d of %d", dict, c, len(src))
		}
		sizes = append(sizes, w)
	}
	if !(sizes[0] > sizes[1] && sizes[1] > sizes[2]*17/10) {
		t.Errorf("stream sizes for dictionaries 4K, 32K, 64K: %v", sizes)
	}
	e, _ := NewEncoder(1, WithDictSize(64<<10))
	dst := make([]byte, 1<<20)
	w, c := e.CompressDestSize(dst, src)
	small, _ := NewDecoder(32 << 10)
	if err := small.Decode(make([]byte, c), dst[:w]); !errors.Is(err, ErrCorrupt) {
		t.Errorf("32 KiB decoder on a 64 KiB stream: %v, want ErrCorrupt", err)
	}
}

// TestDeterministic: the same input gives the same bytes, whatever came
// before on the same Encoder.
func TestDeterministic(t *testing.T) {
	src := text()[:200000]
	for _, level := range []int{1, 6} {
		e1, _ := NewEncoder(level)
		e2, _ := NewEncoder(level)
		a := make([]byte, 8192)
		b := make([]byte, 8192)
		e2.CompressDestSize(b, text()[1<<20:])
		e2.CompressDestSize(b, randomData(9000, 3))
		wa, ca := e1.CompressDestSize(a, src)
		wb, cb := e2.CompressDestSize(b, src)
		if wa != wb || ca != cb || !bytes.Equal(a[:wa], b[:wb]) {
			t.Errorf("level %d: outputs differ (%d/%d vs %d/%d)", level, wa, ca, wb, cb)
		}
	}
}

func TestIncompressibleStopsEarly(t *testing.T) {
	e, _ := NewEncoder(1)
	d, _ := NewDecoder(e.DictSize())
	w, c := check(t, e, d, randomData(1<<20, 4), 1<<20)
	if c > 1024 || w < c {
		t.Errorf("random data: %d → %d bytes, want a stop at the first 1 KiB mark", c, w)
	}
}

// TestDecoderRejects: the exact-mode checks.
func TestDecoderRejects(t *testing.T) {
	e, _ := NewEncoder(1)
	src := text()[:50000]
	dst := make([]byte, 4096)
	w, c := e.CompressDestSize(dst, src)
	stream := dst[:w]
	d, _ := NewDecoder(e.DictSize())
	cases := map[string]struct {
		out, in int
		mod     func([]byte)
	}{
		"output too long":  {c + 1, w, nil},
		"output too short": {c - 1, w, nil},
		"input cut":        {c, w - 1, nil},
		"trailing byte":    {c, w + 1, nil},
		"bad props":        {c, w, func(b []byte) { b[0] = ^byte(225) }},
		"lc+lp > 4":        {c, w, func(b []byte) { b[0] = ^byte((0*5+2)*9 + 3) }},
		"flipped bit":      {c, w, func(b []byte) { b[w/2] ^= 0x10 }},
	}
	for name, k := range cases {
		in := make([]byte, k.in)
		copy(in, stream)
		if k.mod != nil {
			k.mod(in)
		}
		if err := d.Decode(make([]byte, k.out), in); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want ErrCorrupt", name, err)
		}
	}
	if err := d.Decode(make([]byte, c), stream); err != nil {
		t.Errorf("intact stream after the bad ones: %v", err)
	}
}

// TestXZDecodes hands streams to xz's raw LZMA1 decoder (first byte back
// to 0), an independent reader of the format.
func TestXZDecodes(t *testing.T) {
	xz, err := exec.LookPath("xz")
	if err != nil {
		t.Skip("xz not installed")
	}
	for _, level := range []int{0, 1, 6, 9} {
		e, _ := NewEncoder(level, WithDictSize(1<<20))
		src := text()[1<<20:]
		dst := make([]byte, 65536)
		w, c := e.CompressDestSize(dst, src)
		stream := append([]byte(nil), dst[:w]...)
		stream[0] = 0
		cmd := exec.Command(xz, "--format=raw", "--lzma1=lc=3,lp=0,pb=2,dict=1MiB", "-dc")
		cmd.Stdin = bytes.NewReader(stream)
		out, _ := cmd.Output() // no end marker: xz reports an unexpected end
		if len(out) < c || !bytes.Equal(out[:c], src[:c]) {
			t.Errorf("level %d: xz decoded %d bytes, want the %d consumed", level, len(out), c)
		}
	}
}

func TestOptions(t *testing.T) {
	for _, lv := range []int{-1, 10} {
		if _, err := NewEncoder(lv); err == nil {
			t.Errorf("level %d accepted", lv)
		}
	}
	for _, n := range []int{0, 4095, 8<<20 + 1} {
		if _, err := NewEncoder(1, WithDictSize(n)); err == nil {
			t.Errorf("dictionary %d accepted", n)
		}
		if _, err := NewDecoder(n); err == nil {
			t.Errorf("decoder dictionary %d accepted", n)
		}
	}
	e, _ := NewEncoder(6)
	if e.DictSize() != 8<<20 {
		t.Errorf("level 6 dictionary %d", e.DictSize())
	}
	if w, c := e.CompressDestSize(make([]byte, 4096), nil); w != 0 || c != 0 {
		t.Errorf("empty input: %d, %d", w, c)
	}
	if w, c := e.CompressDestSize(make([]byte, 5), []byte("abc")); w != 0 || c != 0 {
		t.Errorf("5-byte budget: %d, %d", w, c)
	}
}

func TestAllocs(t *testing.T) {
	src := text()[:300000]
	for _, level := range []int{1, 6} {
		e, _ := NewEncoder(level)
		dst := make([]byte, 16384)
		e.CompressDestSize(dst, src)
		if n := testing.AllocsPerRun(5, func() { e.CompressDestSize(dst, src) }); n != 0 {
			t.Errorf("level %d: %v allocations per call", level, n)
		}
	}
	d, _ := NewDecoder(8 << 20)
	e, _ := NewEncoder(1)
	dst := make([]byte, 16384)
	w, c := e.CompressDestSize(dst, src)
	out := make([]byte, c)
	if n := testing.AllocsPerRun(5, func() { d.Decode(out, dst[:w]) }); n != 0 {
		t.Errorf("decoder: %v allocations per call", n)
	}
}
