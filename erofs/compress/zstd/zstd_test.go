package zstd

import (
	"bytes"
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
	skewed := randomData(1<<19, 9)
	for i := range skewed {
		skewed[i] &= 0x0f // literals only Huffman can shrink
	}
	return []dataset{
		{"text", text()},
		{"random", randomData(1<<20, 1)},
		{"zeros", make([]byte, 1<<20)},
		{"repetitive", repetitive(1 << 20)},
		{"skewed", skewed},
		{"mixed", append(append(append([]byte{}, text()[:100000]...), randomData(50000, 2)...), make([]byte, 30000)...)},
	}
}

// roundTrip compresses src into a budget, checks the frame and that it
// decodes to the consumed prefix, and returns written and consumed.
func roundTrip(t testing.TB, e *Encoder, src []byte, budget int) (int, int) {
	t.Helper()
	dst := make([]byte, budget)
	w, c := e.CompressDestSize(dst, src)
	if w > budget || c > len(src) || w < 0 || c < 0 {
		t.Fatalf("budget %d, src %d: written %d consumed %d", budget, len(src), w, c)
	}
	if c == 0 {
		if w != 0 {
			t.Fatalf("budget %d: consumed nothing but wrote %d", budget, w)
		}
		return 0, 0
	}
	if !bytes.HasPrefix(dst[:w], []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		t.Fatalf("frame starts % x", dst[:min(w, 4)])
	}
	if wl := windowOf(t, dst[:w]); wl > e.WindowLog() {
		t.Fatalf("frame window log %d, encoder %d", wl, e.WindowLog())
	}
	out := make([]byte, c)
	if err := Decompress(out, dst[:w]); err != nil {
		t.Fatalf("budget %d, consumed %d of %d: %v", budget, c, len(src), err)
	}
	if !bytes.Equal(out, src[:c]) {
		i := 0
		for out[i] == src[i] {
			i++
		}
		t.Fatalf("budget %d: decoded prefix differs at byte %d of %d", budget, i, c)
	}
	// A frame that decodes to c bytes must not decode into c±1.
	if err := Decompress(make([]byte, c+1), dst[:w]); err == nil {
		t.Fatalf("frame of %d bytes accepted for %d", c, c+1)
	}
	return w, c
}

// windowOf reads the window log of a frame header with a Window_Descriptor.
func windowOf(t testing.TB, f []byte) int {
	t.Helper()
	fhd := f[4]
	if fhd&0x20 != 0 {
		t.Fatalf("single-segment frame (descriptor %#x): its window is its size", fhd)
	}
	wd := f[5]
	if wd&7 != 0 {
		t.Fatalf("window descriptor %#x is not a power of two", wd)
	}
	return int(wd>>3) + 10
}

var testLevels = []int{1, 2, 3, 5, 9, 16, 22}

func TestRoundTrip(t *testing.T) {
	for _, ds := range datasets() {
		for _, lv := range testLevels {
			for _, budget := range []int{16, 64, 512, 4096, 16384, 65536, 1 << 20} {
				if testing.Short() && budget > 65536 {
					continue
				}
				t.Run(fmt.Sprintf("%s/L%d/%d", ds.name, lv, budget), func(t *testing.T) {
					e, err := NewEncoder(lv)
					if err != nil {
						t.Fatal(err)
					}
					src := ds.data
					total := 0
					// A few consecutive clusters: state is reused between calls.
					for range 3 {
						w, c := roundTrip(t, e, src, budget)
						if c < len(src) && budget >= 4096 && w < budget-budget/16 {
							t.Errorf("stopped at %d of %d output bytes with input left", w, budget)
						}
						total += c
						src = src[c:]
						if len(src) == 0 || c == 0 {
							break
						}
					}
					if total == 0 && budget >= 64 {
						t.Errorf("nothing fits in %d bytes", budget)
					}
				})
			}
		}
	}
}

// TestSmallInputs covers every input length near the block and header
// edges, whole inputs that fit.
func TestSmallInputs(t *testing.T) {
	e, _ := NewEncoder(1)
	src := text()
	for n := 0; n < 300; n++ {
		w, c := roundTrip(t, e, src[:n], 4096)
		if c != n {
			t.Fatalf("%d bytes: consumed %d (written %d)", n, c, w)
		}
	}
}

func TestOptions(t *testing.T) {
	for _, lv := range []int{0, 23, -1} {
		if _, err := NewEncoder(lv); err == nil {
			t.Errorf("level %d accepted", lv)
		}
	}
	for _, w := range []int{0, 512, 3 << 10, 2 << 20} {
		if _, err := NewEncoder(1, WithWindow(w)); err == nil {
			t.Errorf("window %d accepted", w)
		}
	}
	for _, w := range []int{1 << 10, 1 << 15, 1 << 20} {
		e, err := NewEncoder(1, WithWindow(w))
		if err != nil {
			t.Fatal(err)
		}
		roundTrip(t, e, text(), 65536)
	}
}

// TestDeterministic: same input, same frame, whatever came before.
func TestDeterministic(t *testing.T) {
	src := text()
	a, _ := NewEncoder(3)
	b, _ := NewEncoder(3)
	b.CompressDestSize(make([]byte, 4096), randomData(100000, 5))
	b.CompressDestSize(make([]byte, 65536), src[5000:])
	da, db := make([]byte, 8192), make([]byte, 8192)
	wa, ca := a.CompressDestSize(da, src[1000:])
	wb, cb := b.CompressDestSize(db, src[1000:])
	if wa != wb || ca != cb || !bytes.Equal(da[:wa], db[:wb]) {
		t.Fatalf("frames differ: %d/%d vs %d/%d", wa, ca, wb, cb)
	}
}

// TestZstdCLI checks that the reference decoder agrees.
func TestZstdCLI(t *testing.T) {
	if _, err := exec.LookPath("zstd"); err != nil {
		t.Skip("no zstd CLI")
	}
	for _, ds := range datasets() {
		for _, lv := range []int{1, 9} {
			e, _ := NewEncoder(lv, WithWindow(1<<20))
			for _, budget := range []int{4096, 200000} {
				dst := make([]byte, budget)
				w, c := e.CompressDestSize(dst, ds.data)
				cmd := exec.Command("zstd", "-d", "-c", "-q")
				cmd.Stdin = bytes.NewReader(dst[:w])
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("%s L%d %d: zstd -d: %v", ds.name, lv, budget, err)
				}
				if !bytes.Equal(out, ds.data[:c]) {
					t.Fatalf("%s L%d %d: zstd -d gave %d bytes, want %d", ds.name, lv, budget, len(out), c)
				}
			}
		}
	}
}

// destRatio compresses all of src through budget-sized clusters.
func destRatio(t *testing.T, e *Encoder, src []byte, budget int) float64 {
	in, out := 0, 0
	dst := make([]byte, budget)
	for len(src) > 0 {
		w, c := e.CompressDestSize(dst, src[:min(len(src), 64<<10)])
		if c == 0 {
			t.Fatalf("nothing fits in %d bytes", budget)
		}
		in += c
		out += w
		src = src[c:]
	}
	return float64(in) / float64(out)
}

// TestRatio: filling 4 KiB clusters must compress Go source at least as
// well as klauspost's plain encoder does in independent 16 KiB frames
// (less 2%: the clusters hold about 12 KiB), and higher levels better.
func TestRatio(t *testing.T) {
	src := text()
	enc := newKlauspost(1)
	kin, kout := 0, 0
	for p := 0; p < len(src); p += 16 << 10 {
		kin += min(16<<10, len(src)-p)
		kout += len(enc.EncodeAll(src[p:min(len(src), p+16<<10)], nil))
	}
	kr := float64(kin) / float64(kout)
	var prev float64
	for _, lv := range []int{1, 3, 9} {
		e, _ := NewEncoder(lv)
		r := destRatio(t, e, src, 4096)
		t.Logf("level %d: ratio %.3f (klauspost level 1, 16 KiB frames: %.3f)", lv, r, kr)
		if lv == 1 && r < kr*0.98 {
			t.Errorf("level 1 ratio %.3f, klauspost %.3f", r, kr)
		}
		if r <= prev {
			t.Errorf("level %d ratio %.3f not above the level before (%.3f)", lv, r, prev)
		}
		prev = r
	}
}

// TestRoomToSpare: an input that would fit the budget uncompressed is
// still compressed (a raw block holding as much input is no better).
func TestRoomToSpare(t *testing.T) {
	src := text()
	for _, level := range []int{1, 3, 9} {
		e, err := NewEncoder(level)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{4097, 65536, 200000} {
			dst := make([]byte, 1<<20)
			w, c := e.CompressDestSize(dst, src[:n])
			if c != n || w > n/2 {
				t.Errorf("level %d, %d bytes of text into 1 MiB: written %d, consumed %d", level, n, w, c)
			}
			out := make([]byte, c)
			if err := Decompress(out, dst[:w]); err != nil || !bytes.Equal(out, src[:c]) {
				t.Errorf("level %d, %d bytes: decode: %v", level, n, err)
			}
		}
	}
}
