package lz4

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pierrec "github.com/pierrec/lz4/v4"
	"golang.org/x/sys/unix"
)

// Benchmarks report MB/s of input consumed (10^6 B/s) and the ratio
// (input/output). Run side by side, for example:
//
//	go test -run '^$' -bench . -benchtime 200x ./erofs/compress/lz4/
//
// The destSize benchmarks fill 4 KiB and 64 KiB budgets from a 32 MiB corpus
// of Go sources (or 32 MiB of random bytes); the pierrec ones compress
// 4 KiB and 64 KiB input blocks of the same corpus with a reused Compressor.

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
					for range b.N {
						w, c := e.CompressDestSize(dst, src[pos:])
						in += c
						out += w
						pos += c
						if pos == len(src) {
							pos = 0
						}
					}
					report(b, in, out)
				})
			}
		}
	}
}

func BenchmarkPierrec(b *testing.B) {
	for _, data := range []string{"text", "random"} {
		for _, bs := range []int{4 << 10, 64 << 10} {
			b.Run(fmt.Sprintf("%s/%dK", data, bs>>10), func(b *testing.B) {
				src := benchCorpus(data)
				var c pierrec.Compressor
				dst := make([]byte, pierrec.CompressBlockBound(bs))
				in, out, pos := 0, 0, 0
				b.ResetTimer()
				for range b.N {
					if pos+bs > len(src) {
						pos = 0
					}
					n, err := c.CompressBlock(src[pos:pos+bs], dst)
					if err != nil || n == 0 {
						b.Fatal(n, err)
					}
					in += bs
					out += n
					pos += bs
				}
				report(b, in, out)
			})
		}
	}
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

// TestSpeedTable prints MB/s and ratio of the levels and of pierrec/lz4, the
// best of several interleaved rounds. It runs only with LZ4_TABLE set, e.g.
//
//	LZ4_TABLE=1 go test -run TestSpeedTable -v ./erofs/compress/lz4/
//
// LZ4_TABLE=fast limits it to LevelFast and pierrec, LZ4_TABLE=L9 to level 9.
// threadCPU is the CPU time of the calling thread: unlike wall time, it
// does not count the time other processes take from a shared machine.
func threadCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_THREAD, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// speedCell is one configuration of TestSpeedTable: its best MB/s over the
// rounds and the bytes in and out of one round.
type speedCell struct {
	best      float64
	in, out   int
	name, key string
}

// time runs round, which compresses the same input each time, until it has
// taken at least 50 ms of CPU (incompressible input is rejected so fast that
// one round can take less than the clock's step), and keeps the best speed.
func (c *speedCell) time(round func() (in, out int)) {
	start := threadCPU()
	total := 0
	for {
		in, out := round()
		total += in
		c.in, c.out = in, out
		if d := threadCPU() - start; d >= 50*time.Millisecond {
			c.best = max(c.best, float64(total)/d.Seconds()/1e6)
			return
		}
	}
}

func TestSpeedTable(t *testing.T) {
	mode := os.Getenv("LZ4_TABLE")
	if mode == "" {
		t.Skip("set LZ4_TABLE to run")
	}
	levels := []int{0, 1, 6, 9, 12}
	if mode == "fast" {
		levels = []int{0}
	}
	if l, err := strconv.Atoi(strings.TrimPrefix(mode, "L")); err == nil && strings.HasPrefix(mode, "L") {
		levels = []int{l}
	}
	const rounds = 5
	const perRound = 24 << 20 // input per configuration and round
	type cell = speedCell
	var cells []*cell
	var runs []func(c *cell)
	for _, data := range []string{"text", "random"} {
		src := benchCorpus(data)
		for _, size := range []int{4 << 10, 64 << 10} {
			for _, level := range levels {
				e, _ := NewEncoder(level)
				dst := make([]byte, size)
				amount := perRound
				if level >= 9 && data == "text" {
					amount /= 8
				}
				cells = append(cells, &cell{name: fmt.Sprintf("L%d", level), key: fmt.Sprintf("%s %dK", data, size>>10)})
				runs = append(runs, func(c *cell) {
					c.time(func() (in, out int) {
						for pos := 0; in < amount; {
							// At most 16 budgets of input, as an EROFS
							// writer offers (64 KiB extents, 4 KiB pclusters).
							w, n := e.CompressDestSize(dst, src[pos:min(len(src), pos+16*size)])
							in += n
							out += w
							pos += n
							if pos == len(src) {
								pos = 0
							}
						}
						return in, out
					})
				})
			}
			// LevelFast on pierrec's input: the same blocks, with a budget
			// that holds any of them, so the whole block is compressed.
			{
				e, _ := NewEncoder(LevelFast)
				dst := make([]byte, pierrec.CompressBlockBound(size))
				cells = append(cells, &cell{name: "L0 same-in", key: fmt.Sprintf("%s %dK", data, size>>10)})
				runs = append(runs, func(c *cell) {
					c.time(func() (in, out int) {
						for pos := 0; in < perRound; pos += size {
							if pos+size > len(src) {
								pos = 0
							}
							w, n := e.CompressDestSize(dst, src[pos:pos+size])
							in += n
							out += w
						}
						return in, out
					})
				})
			}
			var pc pierrec.Compressor
			pdst := make([]byte, pierrec.CompressBlockBound(size))
			cells = append(cells, &cell{name: "pierrec", key: fmt.Sprintf("%s %dK", data, size>>10)})
			runs = append(runs, func(c *cell) {
				c.time(func() (in, out int) {
					for pos := 0; in < perRound; pos += size {
						if pos+size > len(src) {
							pos = 0
						}
						n, _ := pc.CompressBlock(src[pos:pos+size], pdst)
						in += size
						out += n
					}
					return in, out
				})
			})
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for range rounds {
		for i, run := range runs {
			run(cells[i])
		}
	}
	for _, c := range cells {
		t.Logf("%-10s %-8s %8.1f MB/s  ratio %.3f", c.key, c.name, c.best, float64(c.in)/float64(c.out))
	}
}

// TestSpeedMkfs measures the levels the way an EROFS writer uses them: the
// first LZ4_MKFS_MB MiB (default 64) of the file LZ4_MKFS, cut into 64 KiB
// extents, each compressed into 4 KiB pclusters one after another. It prints,
// per level, the median thread CPU MB/s of LZ4_MKFS_ROUNDS (default 5)
// interleaved rounds, the output bytes and the number of pclusters, e.g.
//
//	LZ4_MKFS=/var/tmp/erofsbench/tar/src256.tar LZ4_LEVELS=0,1,4,9,12 \
//	GOMAXPROCS=1 taskset -c 1 go test -run TestSpeedMkfs -v ./erofs/compress/lz4/
func TestSpeedMkfs(t *testing.T) {
	name := os.Getenv("LZ4_MKFS")
	if name == "" {
		t.Skip("set LZ4_MKFS to run")
	}
	mb, rounds := 64, 5
	if s := os.Getenv("LZ4_MKFS_MB"); s != "" {
		mb, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("LZ4_MKFS_ROUNDS"); s != "" {
		rounds, _ = strconv.Atoi(s)
	}
	levels := []int{0, 1, 4, 9, 12}
	if s := os.Getenv("LZ4_LEVELS"); s != "" {
		levels = levels[:0]
		for _, f := range strings.Split(s, ",") {
			l, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			levels = append(levels, l)
		}
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	// LZ4_MKFS_OFF=N starts N MiB into the file.
	if s := os.Getenv("LZ4_MKFS_OFF"); s != "" {
		o, _ := strconv.Atoi(s)
		f.Seek(int64(o)<<20, io.SeekStart)
	}
	src := make([]byte, mb<<20)
	n, _ := io.ReadFull(f, src)
	f.Close()
	src = src[:n]
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	speeds := make([][]float64, len(levels))
	outs := make([]int, len(levels))
	blocks := make([]int, len(levels))
	dst := make([]byte, 4096)
	for range rounds {
		for i, level := range levels {
			e, _ := NewEncoder(level)
			out, nb := 0, 0
			start := threadCPU()
			for ext := 0; ext < len(src); ext += 64 << 10 {
				for s := src[ext:min(len(src), ext+64<<10)]; len(s) > 0; {
					w, c := e.CompressDestSize(dst, s)
					if c == 0 {
						t.Fatal("nothing consumed")
					}
					out += w
					nb++
					s = s[c:]
				}
			}
			speeds[i] = append(speeds[i], float64(len(src))/(threadCPU()-start).Seconds()/1e6)
			outs[i], blocks[i] = out, nb
		}
	}
	for i, level := range levels {
		s := speeds[i]
		if os.Getenv("LZ4_MKFS_RAW") != "" {
			for _, v := range s {
				fmt.Printf("raw L%d %.1f\n", level, v)
			}
		}
		slices.Sort(s)
		t.Logf("L%-2d %8.1f MB/s (min %.1f max %.1f)  out %d  blocks %d", level, s[len(s)/2], s[0], s[len(s)-1], outs[i], blocks[i])
	}
}
