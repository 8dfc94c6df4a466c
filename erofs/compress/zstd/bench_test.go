package zstd

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	kzstd "github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// Benchmarks report MB/s of input (10^6 B/s) and the ratio (input/output).
//
//	go test -run '^$' -bench . -benchtime 2000x ./erofs/compress/zstd/
//
// BenchmarkDestSize fills 4, 16 and 64 KiB budgets from a 32 MiB corpus of
// Go sources (or random bytes); BenchmarkKlauspost compresses the same
// corpus as independent frames of 16 and 64 KiB input with klauspost's
// plain encoder, the speed limit of any fixed-output method.

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

func BenchmarkKlauspost(b *testing.B) {
	for _, data := range []string{"text", "random"} {
		for _, size := range []int{16 << 10, 64 << 10} {
			for _, level := range []int{1, 3} {
				b.Run(fmt.Sprintf("%s/%dK/L%d", data, size>>10, level), func(b *testing.B) {
					src := benchCorpus(data)
					enc := newKlauspost(level)
					var dst []byte
					in, out, pos := 0, 0, 0
					b.ResetTimer()
					for range b.N {
						if pos+size > len(src) {
							pos = 0
						}
						dst = enc.EncodeAll(src[pos:pos+size], dst[:0])
						in += size
						out += len(dst)
						pos += size
					}
					report(b, in, out)
				})
			}
		}
	}
}

// TestSpeedTable prints, for each configuration, the median MB/s of
// several interleaved rounds and the ratio, side by side with klauspost's
// plain encoder on independent frames and the erofs-utils-style search.
// It runs only with ZSTD_TABLE set (ZSTD_CORPUS=FILE replaces the text):
//
//	ZSTD_TABLE=1 GOMAXPROCS=1 taskset -c 1 go test -run TestSpeedTable -v ./erofs/compress/zstd/
func TestSpeedTable(t *testing.T) {
	if os.Getenv("ZSTD_TABLE") == "" {
		t.Skip("set ZSTD_TABLE to run")
	}
	levels := []int{1, 3, 9}
	if l := os.Getenv("ZSTD_LEVELS"); l != "" {
		levels = nil
		for _, f := range strings.Split(l, ",") {
			var v int
			fmt.Sscan(f, &v)
			levels = append(levels, v)
		}
	}
	const rounds = 5
	// Every configuration compresses the same first perRound bytes of the
	// corpus in every round.
	const perRound = 8 << 20
	type cell struct {
		mbs, cpu []float64
		in, out  int
		name     string
	}
	// CPU time of this thread: on a shared machine it varies less than
	// wall time.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpuNow := func() time.Duration {
		var ru unix.Rusage
		unix.Getrusage(unix.RUSAGE_THREAD, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var cells []*cell
	var runs []func(c *cell)
	add := func(name string, amount int, f func(amount int) (int, int)) {
		cells = append(cells, &cell{name: name})
		runs = append(runs, func(c *cell) {
			start, cpu := time.Now(), cpuNow()
			in, out := f(amount)
			c.mbs = append(c.mbs, float64(in)/time.Since(start).Seconds()/1e6)
			c.cpu = append(c.cpu, float64(in)/(cpuNow()-cpu).Seconds()/1e6)
			c.in, c.out = in, out
		})
	}
	datas := []string{"text", "random"}
	if d := os.Getenv("ZSTD_DATA"); d != "" {
		datas = strings.Split(d, ",")
	}
	for _, data := range datas {
		src := benchCorpus(data)
		for _, level := range levels {
			for _, budget := range []int{4 << 10, 16 << 10} {
				e, _ := NewEncoder(level, WithWindow(1<<20))
				dst := make([]byte, budget)
				pos := 0
				add(fmt.Sprintf("%s destsize L%d %dK", data, level, budget>>10), perRound, func(amount int) (int, int) {
					pos = 0
					return destSizeRun(e, src, dst, &pos, amount)
				})
			}
			for _, size := range []int{16 << 10, 64 << 10} {
				enc := newKlauspost(level)
				var out []byte
				pos := 0
				add(fmt.Sprintf("%s klauspost L%d %dK frames", data, level, size>>10), perRound, func(amount int) (int, int) {
					in, o := 0, 0
					pos = 0
					for in < amount {
						if pos+size > len(src) {
							pos = 0
						}
						out = enc.EncodeAll(src[pos:pos+size], out[:0])
						in += size
						o += len(out)
						pos += size
					}
					return in, o
				})
			}
			if level == 1 && os.Getenv("ZSTD_SEARCH") != "" {
				s, _ := newSearchEncoder(level, 1<<20)
				dst := make([]byte, 4<<10)
				pos := 0
				add(fmt.Sprintf("%s search L%d 4K", data, level), perRound, func(amount int) (int, int) {
					pos = 0
					return destSizeRun(s, src, dst, &pos, amount)
				})
			}
		}
	}
	for range rounds {
		for i, r := range runs {
			r(cells[i])
		}
	}
	for _, c := range cells {
		sort.Float64s(c.mbs)
		sort.Float64s(c.cpu)
		t.Logf("%-36s %7.1f MB/s (min %6.1f max %6.1f) %7.1f MB/s of CPU  ratio %.3f", c.name, c.mbs[len(c.mbs)/2], c.mbs[0], c.mbs[len(c.mbs)-1], c.cpu[len(c.cpu)/2], float64(c.in)/float64(c.out))
	}
}

// TestKlauspostFile prints the MB/s (wall and CPU) of klauspost's plain
// encoder compressing the file ZSTD_FILE as independent frames of
// ZSTD_FRAME bytes (default 16 KiB) at ZSTD_LEVEL (default 1): the
// yardstick of the mkfs speed target.
//
//	ZSTD_FILE=source.bin GOMAXPROCS=1 taskset -c 1 go test -run TestKlauspostFile -v ./erofs/compress/zstd/
func TestKlauspostFile(t *testing.T) {
	name := os.Getenv("ZSTD_FILE")
	if name == "" {
		t.Skip("set ZSTD_FILE to run")
	}
	src, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	frame, level := 16<<10, 1
	if v := os.Getenv("ZSTD_FRAME"); v != "" {
		fmt.Sscan(v, &frame)
	}
	if v := os.Getenv("ZSTD_LEVEL"); v != "" {
		fmt.Sscan(v, &level)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ru0, ru1 unix.Rusage
	enc := newKlauspost(level)
	var out []byte
	total := 0
	unix.Getrusage(unix.RUSAGE_THREAD, &ru0)
	start := time.Now()
	for pos := 0; pos < len(src); pos += frame {
		out = enc.EncodeAll(src[pos:min(len(src), pos+frame)], out[:0])
		total += len(out)
	}
	wall := time.Since(start)
	unix.Getrusage(unix.RUSAGE_THREAD, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	t.Logf("klauspost L%d, %d-byte frames: %.1f MB/s wall, %.1f MB/s CPU, ratio %.3f", level, frame,
		float64(len(src))/wall.Seconds()/1e6, float64(len(src))/cpu.Seconds()/1e6, float64(len(src))/float64(total))

	// This package on the same bytes: 4 KiB pclusters from 64 KiB extents.
	e, _ := NewEncoder(level, WithWindow(64<<10))
	dst := make([]byte, 4096)
	total = 0
	var pieces []int
	unix.Getrusage(unix.RUSAGE_THREAD, &ru0)
	start = time.Now()
	for pos := 0; pos < len(src); {
		w, c := e.CompressDestSize(dst, src[pos:min(len(src), pos+maxExtent)])
		if c == 0 {
			c, w = min(len(dst), len(src)-pos), min(len(dst), len(src)-pos)
		}
		pieces = append(pieces, c)
		pos += c
		total += w
	}
	wall = time.Since(start)
	unix.Getrusage(unix.RUSAGE_THREAD, &ru1)
	cpu = time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	t.Logf("destsize L%d, 4 KiB budget: %.1f MB/s wall, %.1f MB/s CPU, ratio %.3f", level,
		float64(len(src))/wall.Seconds()/1e6, float64(len(src))/cpu.Seconds()/1e6, float64(len(src))/float64(total))

	// klauspost on exactly the pieces the clusters hold (same input size).
	total = 0
	unix.Getrusage(unix.RUSAGE_THREAD, &ru0)
	start = time.Now()
	pos := 0
	for _, c := range pieces {
		out = enc.EncodeAll(src[pos:pos+c], out[:0])
		total += len(out)
		pos += c
	}
	wall = time.Since(start)
	unix.Getrusage(unix.RUSAGE_THREAD, &ru1)
	cpu = time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	t.Logf("klauspost L%d, the same %d pieces (avg %d bytes): %.1f MB/s wall, %.1f MB/s CPU, ratio %.3f", level, len(pieces), len(src)/len(pieces),
		float64(len(src))/wall.Seconds()/1e6, float64(len(src))/cpu.Seconds()/1e6, float64(len(src))/float64(total))
}
