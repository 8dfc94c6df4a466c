package lz4

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	pierrec "github.com/pierrec/lz4/v4"
)

// Benchmarks report MB/s of input consumed (10^6 B/s) and the ratio
// (input/output). Run side by side, for example:
//
//	go test -run '^$' -bench . -benchtime 200x ./erofs/compress/lz4/
//
// and compare runs with -count and benchstat. Each also reports cpu-MB/s,
// the input over the process's CPU time (user and system): on a shared,
// loaded host it spreads far less than MB/s, which is over wall time.
// BenchmarkDestSize and
// BenchmarkExtents fill 4 KiB and 64 KiB budgets from a 32 MiB corpus of
// Go sources (or 32 MiB of random bytes); BenchmarkBlocks compresses 4 KiB
// and 64 KiB input blocks of the same corpus with pierrec/lz4 and with
// LevelFast; BenchmarkMkfs compresses a file of your choice.

const benchCorpusSize = 32 << 20

var (
	benchOnce sync.Once
	benchData map[string][]byte
)

func benchCorpus(name string) []byte {
	benchOnce.Do(func() {
		benchData = map[string][]byte{
			"text":   goSource(benchCorpusSize),
			"random": randomData(benchCorpusSize, 5),
		}
		// LZ4_CORPUS=FILE measures on the first 32 MiB of FILE instead of
		// the Go sources, e.g. a benchmark dataset's tar.
		if name := os.Getenv("LZ4_CORPUS"); name != "" {
			f, err := os.Open(name)
			if err != nil {
				panic(err)
			}
			defer f.Close()
			b := make([]byte, benchCorpusSize)
			n, _ := io.ReadFull(f, b)
			benchData["text"] = b[:n]
		}
	})
	return benchData[name]
}

func report(b *testing.B, in, out int) {
	s := b.Elapsed().Seconds()
	if s > 0 {
		b.ReportMetric(float64(in)/s/1e6, "MB/s")
	}
	if out > 0 {
		b.ReportMetric(float64(in)/float64(out), "ratio")
	}
	b.ReportMetric(0, "ns/op")
}

// cpuClock measures a benchmark's CPU time from its start (call after
// ResetTimer).
type cpuClock time.Duration

func startCPU() cpuClock { return cpuClock(cpuTime()) }

// report adds cpu-MB/s: in bytes over the CPU time since c started.
func (c cpuClock) report(b *testing.B, in int) {
	if d := cpuTime() - time.Duration(c); d > 0 && c != 0 {
		b.ReportMetric(float64(in)/d.Seconds()/1e6, "cpu-MB/s")
	}
}

func BenchmarkDestSize(b *testing.B) {
	for _, data := range []string{"text", "random"} {
		for _, budget := range []int{4 << 10, 64 << 10} {
			for _, level := range []int{0, 1, 6, 9, 12} {
				b.Run(fmt.Sprintf("%s/%dK/L%d", data, budget>>10, level), func(b *testing.B) {
					src := benchCorpus(data)
					e, _ := NewEncoder(level)
					dst := make([]byte, budget)
					in, out, pos := 0, 0, 0
					b.ResetTimer()
					cpu := startCPU()
					for range b.N {
						w, c := e.CompressDestSize(dst, src[pos:])
						in += c
						out += w
						pos += c
						if pos == len(src) {
							pos = 0
						}
					}
					cpu.report(b, in)
					report(b, in, out)
				})
			}
		}
	}
}

// BenchmarkBlocks compresses whole blocks of 4 and 64 KiB, one per
// operation: pierrec/lz4 with a reused Compressor, and LevelFast given the
// same blocks with a budget that holds any of them, so that both do the
// same work.
func BenchmarkBlocks(b *testing.B) {
	for _, data := range []string{"text", "random"} {
		for _, bs := range []int{4 << 10, 64 << 10} {
			b.Run(fmt.Sprintf("%s/%dK/pierrec", data, bs>>10), func(b *testing.B) {
				var c pierrec.Compressor
				benchBlocks(b, benchCorpus(data), bs, pierrec.CompressBlockBound(bs), func(dst, src []byte) int {
					n, err := c.CompressBlock(src, dst)
					if err != nil || n == 0 {
						b.Fatal(n, err)
					}
					return n
				})
			})
			b.Run(fmt.Sprintf("%s/%dK/L0", data, bs>>10), func(b *testing.B) {
				e, _ := NewEncoder(LevelFast)
				benchBlocks(b, benchCorpus(data), bs, pierrec.CompressBlockBound(bs), func(dst, src []byte) int {
					w, c := e.CompressDestSize(dst, src)
					if c != len(src) {
						b.Fatalf("consumed %d of %d", c, len(src))
					}
					return w
				})
			})
		}
	}
}

// benchBlocks runs compress on the next block of bs bytes of src per
// operation and reports the ratio.
func benchBlocks(b *testing.B, src []byte, bs, bound int, compress func(dst, src []byte) int) {
	dst := make([]byte, bound)
	b.SetBytes(int64(bs))
	in, out, pos := 0, 0, 0
	b.ResetTimer()
	cpu := startCPU()
	for range b.N {
		if pos+bs > len(src) {
			pos = 0
		}
		out += compress(dst, src[pos:pos+bs])
		in += bs
		pos += bs
	}
	cpu.report(b, in)
	reportRatio(b, in, out)
}

// reportRatio adds the ratio, input/output, to a benchmark that measures
// its speed with SetBytes.
func reportRatio(b *testing.B, in, out int) {
	if out > 0 {
		b.ReportMetric(float64(in)/float64(out), "ratio")
	}
}

// BenchmarkExtents compresses one extent per operation the way an EROFS
// writer does: 16 budgets of input (64 KiB extents at 4 KiB pclusters),
// cut into pclusters of the budget until all of it is consumed.
func BenchmarkExtents(b *testing.B) {
	for _, data := range []string{"text", "random"} {
		for _, budget := range []int{4 << 10, 64 << 10} {
			for _, level := range []int{0, 1, 6, 9, 12} {
				b.Run(fmt.Sprintf("%s/%dK/L%d", data, budget>>10, level), func(b *testing.B) {
					src := benchCorpus(data)
					e, _ := NewEncoder(level)
					dst := make([]byte, budget)
					ext := 16 * budget
					b.SetBytes(int64(ext))
					out, pos := 0, 0
					b.ResetTimer()
					cpu := startCPU()
					for range b.N {
						if pos+ext > len(src) {
							pos = 0
						}
						out += compressExtent(b, e, dst, src[pos:pos+ext])
						pos += ext
					}
					cpu.report(b, b.N*ext)
					reportRatio(b, b.N*ext, out)
				})
			}
		}
	}
}

// compressExtent cuts all of ext into pclusters of len(dst) and returns
// the bytes written.
func compressExtent(b *testing.B, e *Encoder, dst, ext []byte) (out int) {
	for len(ext) > 0 {
		w, c := e.CompressDestSize(dst, ext)
		if c == 0 {
			b.Fatal("nothing consumed")
		}
		out += w
		ext = ext[c:]
	}
	return out
}

func BenchmarkDecompress(b *testing.B) {
	src := benchCorpus("text")
	for _, budget := range []int{4 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("%dK", budget>>10), func(b *testing.B) {
			e, _ := NewEncoder(LevelFast)
			// Blocks of the first 4 MiB.
			var blocks [][]byte
			var sizes []int
			for s := src[:4<<20]; len(s) > 0; {
				dst := make([]byte, budget)
				w, c := e.CompressDestSize(dst, s)
				blocks = append(blocks, dst[:w])
				sizes = append(sizes, c)
				s = s[c:]
			}
			out := make([]byte, 1<<20)
			in := 0
			b.ResetTimer()
			for i := range b.N {
				k := i % len(blocks)
				n, err := Decompress(out[:sizes[k]], blocks[k])
				if err != nil {
					b.Fatal(err)
				}
				in += n
			}
			report(b, in, 0)
		})
	}
}

// BenchmarkMkfs compresses a file the way an EROFS writer does, one
// operation the whole of it: the first LZ4_MKFS_MB MiB (default 64) of the
// file LZ4_MKFS, from LZ4_MKFS_OFF MiB on (default 0), cut into 64 KiB
// extents, each into 4 KiB pclusters. Besides MB/s it reports the ratio
// and the pclusters written. It runs only with LZ4_MKFS set, e.g.
//
//	LZ4_MKFS=/var/tmp/ocierofs-bench/tar/src256.tar GOMAXPROCS=1 taskset -c 1 \
//	    go test -run '^$' -bench 'Mkfs/L(0|9)$' -count 5 ./erofs/compress/lz4/
func BenchmarkMkfs(b *testing.B) {
	name := os.Getenv("LZ4_MKFS")
	if name == "" {
		b.Skip("set LZ4_MKFS to a file to run")
	}
	mb, off := 64, 0
	if s := os.Getenv("LZ4_MKFS_MB"); s != "" {
		mb, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("LZ4_MKFS_OFF"); s != "" {
		off, _ = strconv.Atoi(s)
	}
	f, err := os.Open(name)
	if err != nil {
		b.Fatal(err)
	}
	src := make([]byte, mb<<20)
	n, err := f.ReadAt(src, int64(off)<<20)
	f.Close()
	if n == 0 {
		b.Fatalf("%s from %d MiB: %v", name, off, err)
	}
	src = src[:n]
	for _, level := range []int{0, 1, 4, 9, 12} {
		b.Run(fmt.Sprintf("L%d", level), func(b *testing.B) {
			e, _ := NewEncoder(level)
			dst := make([]byte, 4096)
			b.SetBytes(int64(len(src)))
			out, pclusters := 0, 0
			cpu := startCPU()
			for range b.N {
				for ext := 0; ext < len(src); ext += 64 << 10 {
					for s := src[ext:min(len(src), ext+64<<10)]; len(s) > 0; {
						w, c := e.CompressDestSize(dst, s)
						if c == 0 {
							b.Fatal("nothing consumed")
						}
						out += w
						pclusters++
						s = s[c:]
					}
				}
			}
			cpu.report(b, b.N*len(src))
			reportRatio(b, b.N*len(src), out)
			b.ReportMetric(float64(pclusters)/float64(b.N), "pclusters/op")
		})
	}
}
