package deflate

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"

	kflate "github.com/klauspost/compress/flate"
)

// Benchmarks report MB/s of input consumed (10^6 B/s), "ratio" (input /
// bytes written) and "img" (input / whole 4 KiB blocks, what an EROFS image
// spends). An operation is one pass over the corpus. Run single-threaded,
// side by side, and compare runs with -count and benchstat:
//
//	GOMAXPROCS=1 taskset -c 1 go test -run '^$' -bench . -benchtime 1x ./erofs/compress/deflate/
//
// The text corpus is 16 MiB of GOROOT's Go sources, or of the file named by
// $DEFLATE_BENCH_TEXT (for example source.bin of make-datasets.sh, sampled
// in 16 pieces spread over it); random
// is 16 MiB of seeded random bytes. Every call gets the next 1 MiB of the
// corpus (the default EROFS extent bound) and advances by what it consumed.
//
//   - BenchmarkDestSize/…/own-L: this package.
//   - BenchmarkDestSize/…/bisect-L: erofs-utils' fixed-output method for
//     libdeflate (compress whole candidate prefixes, seeded with the last
//     size, ratio-guided then halving) over klauspost/compress/flate.
//   - BenchmarkPlain/…/klauspost-L: the plain klauspost encoder compressing
//     exactly the pieces own-L consumed — the speed limit to approach.
//   - BenchmarkTar: the files of a tar, as an image holds them.

const benchCorpusSize = 16 << 20

var (
	benchOnce sync.Once
	benchData map[string][]byte
)

func benchCorpus(b *testing.B, name string) []byte {
	benchOnce.Do(func() {
		text := goSource(benchCorpusSize)
		if f := os.Getenv("DEFLATE_BENCH_TEXT"); f != "" {
			t, err := sampleFile(f, benchCorpusSize)
			if err != nil {
				b.Fatal(err)
			}
			text = t
		}
		benchData = map[string][]byte{"text": text, "random": randomBytes(benchCorpusSize, 5)}
	})
	return benchData[name]
}

// sampleFile reads size bytes of file: all of it if it is small enough,
// else 16 pieces spread evenly over it.
func sampleFile(name string, size int) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() <= int64(size) {
		return io.ReadAll(f)
	}
	out := make([]byte, size)
	piece := size / 16
	for k := range 16 {
		if _, err := f.ReadAt(out[k*piece:(k+1)*piece], st.Size()/16*int64(k)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

type destSizer interface {
	CompressDestSize(dst, src []byte) (int, int)
}

// report adds the ratio and img metrics to a benchmark that measures its
// speed with SetBytes.
func report(b *testing.B, in, out, blocks int) {
	if out > 0 {
		b.ReportMetric(float64(in)/float64(out), "ratio")
		b.ReportMetric(float64(in)/float64(blocks*4096), "img")
	}
}

// runDestSize passes the whole corpus through enc once per iteration, in
// windows of at most 1 MiB.
func runDestSize(b *testing.B, enc destSizer, src []byte, budget int) {
	dst := make([]byte, budget)
	in, out, blocks := 0, 0, 0
	b.SetBytes(int64(len(src)))
	b.ResetTimer()
	for range b.N {
		for pos := 0; pos < len(src); {
			w, c := enc.CompressDestSize(dst, src[pos:min(len(src), pos+1<<20)])
			if c == 0 {
				b.Fatal("nothing consumed")
			}
			in, out, pos = in+c, out+w, pos+c
			blocks += (w + 4095) / 4096
		}
	}
	report(b, in, out, blocks)
}

var budgets = []int{4 << 10, 64 << 10}

func BenchmarkDestSize(b *testing.B) {
	for _, data := range []string{"text", "random"} {
		for _, budget := range budgets {
			for level := LevelMin; level <= LevelMax; level++ {
				b.Run(fmt.Sprintf("%s/%dK/own-L%d", data, budget>>10, level), func(b *testing.B) {
					e, _ := NewEncoder(level)
					runDestSize(b, e, benchCorpus(b, data), budget)
				})
			}
			for _, level := range []int{1, 6} {
				b.Run(fmt.Sprintf("%s/%dK/bisect-L%d", data, budget>>10, level), func(b *testing.B) {
					runDestSize(b, newBisect(level), benchCorpus(b, data), budget)
				})
			}
		}
	}
}

// BenchmarkPlain compresses the pieces own-L consumes with the plain
// klauspost encoder at the same level.
func BenchmarkPlain(b *testing.B) {
	for _, data := range []string{"text", "random"} {
		for _, budget := range budgets {
			for _, level := range []int{1, 6, 9} {
				b.Run(fmt.Sprintf("%s/%dK/klauspost-L%d", data, budget>>10, level), func(b *testing.B) {
					src := benchCorpus(b, data)
					var pieces []int
					e, _ := NewEncoder(level)
					dst := make([]byte, budget)
					for pos := 0; pos < len(src); {
						_, c := e.CompressDestSize(dst, src[pos:min(len(src), pos+1<<20)])
						pieces = append(pieces, c)
						pos += c
					}
					var buf bytes.Buffer
					w, _ := kflate.NewWriter(&buf, level)
					in, out, blocks := 0, 0, 0
					b.SetBytes(int64(len(src)))
					b.ResetTimer()
					for range b.N {
						pos := 0
						for _, n := range pieces {
							buf.Reset()
							w.Reset(&buf)
							w.Write(src[pos : pos+n])
							w.Close()
							in, out, pos = in+n, out+buf.Len(), pos+n
							blocks += (buf.Len() + 4095) / 4096
						}
					}
					report(b, in, out, blocks)
				})
			}
		}
	}
}

// bisect is erofs-utils' fixed-output method for libdeflate, over klauspost
// flate: compress a whole candidate prefix, start from 15/16 of the last
// call's result (or 4× the budget), grow by the ratio while it fits, halve
// the gap when it does not, and stop when the gap closes or the output is
// within 22-2·level bytes of the budget.
type bisect struct {
	level int
	w     *kflate.Writer
	buf   bytes.Buffer
	last  int
}

func newBisect(level int) *bisect {
	b := &bisect{level: level}
	b.w, _ = kflate.NewWriter(&b.buf, level)
	return b
}

func (b *bisect) try(src []byte) int {
	b.buf.Reset()
	b.w.Reset(&b.buf)
	b.w.Write(src)
	b.w.Close()
	return b.buf.Len()
}

func (b *bisect) CompressDestSize(dst, src []byte) (int, int) {
	l, lsize, r := 0, 0, len(src)+1
	m := 4 * len(dst)
	if b.last > 0 {
		m = b.last * 15 / 16
	}
	for {
		m = min(max(m, l+1), r-1)
		cs := b.try(src[:m])
		if cs <= len(dst) {
			copy(dst, b.buf.Bytes())
			l, lsize = m, cs
			if r <= l+1 || cs+22-2*b.level >= len(dst) {
				break
			}
			m = len(dst) * m / cs
		} else {
			r = m
			if r <= l+1 {
				break
			}
			m = (l + r) / 2
		}
	}
	b.last = l
	if lsize > 0 && dst[0] == 0 {
		dst[0] |= 8
	}
	return lsize, l
}
