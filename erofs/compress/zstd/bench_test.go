package zstd

import (
	"fmt"
	"os"
	"sync"
	"testing"

	kzstd "github.com/klauspost/compress/zstd"
)

// Benchmarks report MB/s of input (10^6 B/s) and the ratio (input/output).
//
//	go test -run '^$' -bench . -benchtime 2000x ./erofs/compress/zstd/
//
// and compare runs with -count and benchstat. BenchmarkDestSize fills 4,
// 16 and 64 KiB budgets from a 32 MiB corpus of Go sources (or random
// bytes; ZSTD_CORPUS=FILE replaces the sources); BenchmarkExtents cuts
// 64 KiB extents of it into pclusters as an EROFS writer does;
// BenchmarkKlauspost compresses it as independent frames with klauspost's
// plain encoder; BenchmarkFile compresses a file of your choice.

const benchCorpusSize = 32 << 20

// maxExtent bounds the input of one call, as an EROFS extent does.
const maxExtent = 64 << 10

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
		if f := os.Getenv("ZSTD_CORPUS"); f != "" {
			if b, err := os.ReadFile(f); err == nil {
				benchData["text"] = b[:min(len(b), benchCorpusSize)]
			}
		}
	})
	return benchData[name]
}

func report(b *testing.B, in, out int) {
	if s := b.Elapsed().Seconds(); s > 0 {
		b.ReportMetric(float64(in)/s/1e6, "MB/s")
	}
	if out > 0 {
		b.ReportMetric(float64(in)/float64(out), "ratio")
	}
	b.ReportMetric(0, "ns/op")
}

// destSizeRun compresses clusters from src until amount bytes are used.
func destSizeRun(e interface {
	CompressDestSize(dst, src []byte) (int, int)
}, src, dst []byte, pos *int, amount int) (in, out int) {
	for in < amount {
		// Extents of at most 64 KiB, as mkfs.erofs --max-extent-bytes=65536.
		w, c := e.CompressDestSize(dst, src[*pos:min(len(src), *pos+maxExtent)])
		if c == 0 {
			c = min(len(dst), len(src)-*pos)
			w = c
		}
		in += c
		out += w
		*pos += c
		if *pos == len(src) {
			*pos = 0
		}
	}
	return in, out
}

func BenchmarkDestSize(b *testing.B) {
	for _, data := range []string{"text", "random"} {
		for _, budget := range []int{4 << 10, 16 << 10, 64 << 10} {
			for _, level := range []int{1, 3, 9} {
				b.Run(fmt.Sprintf("%s/%dK/L%d", data, budget>>10, level), func(b *testing.B) {
					src := benchCorpus(data)
					e, _ := NewEncoder(level)
					dst := make([]byte, budget)
					in, out, pos := 0, 0, 0
					b.ResetTimer()
					for range b.N {
						i, o := destSizeRun(e, src, dst, &pos, 1)
						in += i
						out += o
					}
					report(b, in, out)
				})
			}
		}
	}
}

func newKlauspost(level int) *kzstd.Encoder {
	enc, _ := kzstd.NewWriter(nil,
		kzstd.WithEncoderLevel(kzstd.EncoderLevelFromZstd(level)),
		kzstd.WithWindowSize(1<<20),
		kzstd.WithEncoderCRC(false),
		kzstd.WithEncoderConcurrency(1))
	return enc
}

// BenchmarkKlauspost compresses independent frames of 16 and 64 KiB with
// klauspost's plain encoder, one frame per operation: the speed limit of
// any fixed-output method.
func BenchmarkKlauspost(b *testing.B) {
	for _, data := range []string{"text", "random"} {
		for _, size := range []int{16 << 10, 64 << 10} {
			for _, level := range []int{1, 3, 9} {
				b.Run(fmt.Sprintf("%s/%dK/L%d", data, size>>10, level), func(b *testing.B) {
					src := benchCorpus(data)
					enc := newKlauspost(level)
					var dst []byte
					b.SetBytes(int64(size))
					out, pos := 0, 0
					b.ResetTimer()
					for range b.N {
						if pos+size > len(src) {
							pos = 0
						}
						dst = enc.EncodeAll(src[pos:pos+size], dst[:0])
						out += len(dst)
						pos += size
					}
					reportRatio(b, b.N*size, out)
				})
			}
		}
	}
}

// reportRatio adds the ratio, input/output, to a benchmark that measures
// its speed with SetBytes.
func reportRatio(b *testing.B, in, out int) {
	if out > 0 {
		b.ReportMetric(float64(in)/float64(out), "ratio")
	}
}

// BenchmarkExtents compresses one 64 KiB extent per operation the way an
// EROFS writer does: cut into pclusters of 4 or 16 KiB until all of it is
// consumed, with the kernel's largest window. The search sub-benchmark is
// erofs-utils' method (whole candidate prefixes as frames) at level 1.
func BenchmarkExtents(b *testing.B) {
	for _, data := range []string{"text", "random"} {
		for _, level := range []int{1, 3, 9} {
			for _, budget := range []int{4 << 10, 16 << 10} {
				b.Run(fmt.Sprintf("%s/%dK/L%d", data, budget>>10, level), func(b *testing.B) {
					e, _ := NewEncoder(level, WithWindow(1<<20))
					benchExtents(b, e, benchCorpus(data), budget)
				})
			}
		}
		b.Run(fmt.Sprintf("%s/4K/search-L1", data), func(b *testing.B) {
			s, err := newSearchEncoder(1, 1<<20)
			if err != nil {
				b.Fatal(err)
			}
			benchExtents(b, s, benchCorpus(data), 4<<10)
		})
	}
}

type destSizer interface {
	CompressDestSize(dst, src []byte) (int, int)
}

func benchExtents(b *testing.B, e destSizer, src []byte, budget int) {
	dst := make([]byte, budget)
	b.SetBytes(maxExtent)
	out, pos := 0, 0
	b.ResetTimer()
	for range b.N {
		if pos+maxExtent > len(src) {
			pos = 0
		}
		out += compressExtent(e, dst, src[pos:pos+maxExtent])
		pos += maxExtent
	}
	reportRatio(b, b.N*maxExtent, out)
}

// compressExtent cuts all of ext into pclusters of len(dst) and returns
// the bytes written; a pcluster of which nothing fits is stored plain.
func compressExtent(e destSizer, dst, ext []byte) (out int) {
	for len(ext) > 0 {
		w, c := e.CompressDestSize(dst, ext)
		if c == 0 {
			c = min(len(dst), len(ext))
			w = c
		}
		out += w
		ext = ext[c:]
	}
	return out
}

// BenchmarkFile compresses the file ZSTD_FILE, one operation the whole of
// it, at ZSTD_LEVEL (default 1): as independent frames of ZSTD_FRAME bytes
// (default 16 KiB) with klauspost's plain encoder, the yardstick of the
// mkfs speed target; with this package, 64 KiB extents into 4 KiB
// pclusters; and with klauspost's encoder on exactly the pieces those
// pclusters hold. It runs only with ZSTD_FILE set:
//
//	ZSTD_FILE=source.bin GOMAXPROCS=1 taskset -c 1 \
//	    go test -run '^$' -bench File -count 5 ./erofs/compress/zstd/
func BenchmarkFile(b *testing.B) {
	name := os.Getenv("ZSTD_FILE")
	if name == "" {
		b.Skip("set ZSTD_FILE to a file to run")
	}
	src, err := os.ReadFile(name)
	if err != nil {
		b.Fatal(err)
	}
	frame, level := 16<<10, 1
	if v := os.Getenv("ZSTD_FRAME"); v != "" {
		fmt.Sscan(v, &frame)
	}
	if v := os.Getenv("ZSTD_LEVEL"); v != "" {
		fmt.Sscan(v, &level)
	}
	enc := newKlauspost(level)
	b.Run(fmt.Sprintf("klauspost-L%d-%dK-frames", level, frame>>10), func(b *testing.B) {
		var dst []byte
		b.SetBytes(int64(len(src)))
		out := 0
		for range b.N {
			for pos := 0; pos < len(src); pos += frame {
				dst = enc.EncodeAll(src[pos:min(len(src), pos+frame)], dst[:0])
				out += len(dst)
			}
		}
		reportRatio(b, b.N*len(src), out)
	})
	// The pieces this package's pclusters hold, for klauspost to compress
	// the same input.
	e, _ := NewEncoder(level, WithWindow(maxExtent))
	dst := make([]byte, 4096)
	var pieces []int
	for pos := 0; pos < len(src); {
		ext := src[pos:min(len(src), pos+maxExtent)]
		for len(ext) > 0 {
			_, c := e.CompressDestSize(dst, ext)
			if c == 0 {
				c = min(len(dst), len(ext))
			}
			pieces = append(pieces, c)
			ext, pos = ext[c:], pos+c
		}
	}
	b.Run(fmt.Sprintf("L%d-4K", level), func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		out := 0
		for range b.N {
			for pos := 0; pos < len(src); pos += maxExtent {
				out += compressExtent(e, dst, src[pos:min(len(src), pos+maxExtent)])
			}
		}
		reportRatio(b, b.N*len(src), out)
	})
	b.Run(fmt.Sprintf("klauspost-L%d-pieces", level), func(b *testing.B) {
		var dst []byte
		b.SetBytes(int64(len(src)))
		out := 0
		for range b.N {
			pos := 0
			for _, c := range pieces {
				dst = enc.EncodeAll(src[pos:pos+c], dst[:0])
				out += len(dst)
				pos += c
			}
		}
		reportRatio(b, b.N*len(src), out)
		b.ReportMetric(float64(len(src))/float64(len(pieces)), "B/piece")
	})
}
