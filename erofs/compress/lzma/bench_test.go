package lzma

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Benchmarks report MB/s of input consumed (10^6 B/s) and the ratio
// (input/output). The corpus is 32 MiB of Go sources, or the file named by
// LZMA_BENCH_FILE (for example the 256 MiB source.bin of
// shared/bench/make-datasets.sh); random is 32 MiB of random bytes.
// Single-thread figures, side by side with xz:
//
//	GOMAXPROCS=1 taskset -c 1 go test -run '^$' -bench 'DestSize|XZ' -benchtime 3x ./erofs/compress/lzma/
//
// DestSize fills 4 KiB and 64 KiB budgets from windows of at most 64 KiB
// of input (mkfs.erofs --max-extent-bytes=65536, the baseline's setting),
// the way the EROFS builder drives the encoder: each call starts where the
// previous one stopped. One op is one pass over the corpus. XZ times
// `xz --format=raw --lzma1=preset=N` over the same bytes as one stream (the
// C yardstick: one stream, no pcluster cuts, so its ratio is higher).

var (
	benchOnce sync.Once
	benchData map[string][]byte
)

func benchCorpus(b *testing.B, name string) []byte {
	benchOnce.Do(func() {
		benchData = map[string][]byte{"random": randomData(32<<20, 5)}
		if f := os.Getenv("LZMA_BENCH_FILE"); f != "" {
			data, err := os.ReadFile(f)
			if err != nil {
				b.Fatal(err)
			}
			benchData["text"] = data
		} else {
			benchData["text"] = goSource(32 << 20)
		}
	})
	return benchData[name]
}

// cpuTime is the process's user+system time: on a shared machine it
// measures the work better than the wall clock.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func report(b *testing.B, in, out int64) {
	if s := b.Elapsed().Seconds(); s > 0 {
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
			for _, level := range []int{0, 1, 2, 3, 4, 6, 9} {
				b.Run(fmt.Sprintf("%s/%dK/L%d", data, budget>>10, level), func(b *testing.B) {
					src := benchCorpus(b, data)
					e, _ := NewEncoder(level, WithDictSize(max(32<<10, 8*budget)))
					dst := make([]byte, budget)
					var in, out int64
					b.ResetTimer()
					t0 := cpuTime()
					for range b.N {
						for pos := 0; pos < len(src); {
							win := src[pos:min(len(src), pos+64<<10)]
							w, c := e.CompressDestSize(dst, win)
							if c == 0 || w >= c {
								// Stored plain, as EROFS does: one block.
								c, w = min(4096, len(win)), min(4096, len(win))
							}
							in += int64(c)
							out += int64((w + 4095) &^ 4095)
							pos += c
						}
					}
					b.ReportMetric(float64(in)/(cpuTime()-t0).Seconds()/1e6, "cpuMB/s")
					report(b, in, out)
				})
			}
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, level := range []int{1, 6} {
		b.Run(fmt.Sprintf("text/64K/L%d", level), func(b *testing.B) {
			src := benchCorpus(b, "text")[:8<<20]
			e, _ := NewEncoder(level)
			d, _ := NewDecoder(e.DictSize())
			type piece struct{ comp, n int }
			var pieces []piece
			var stream []byte
			dst := make([]byte, 64<<10)
			for pos := 0; pos < len(src); {
				w, c := e.CompressDestSize(dst, src[pos:])
				stream = append(stream, dst[:w]...)
				pieces = append(pieces, piece{w, c})
				pos += c
			}
			out := make([]byte, len(src))
			b.ResetTimer()
			var n int64
			for range b.N {
				s, o := 0, 0
				for _, p := range pieces {
					if err := d.Decode(out[o:o+p.n], stream[s:s+p.comp]); err != nil {
						b.Fatal(err)
					}
					s += p.comp
					o += p.n
				}
				n += int64(o)
			}
			report(b, n, 0)
		})
	}
}

// BenchmarkXZ times xz's raw LZMA1 encoder (liblzma, C) on the same bytes.
func BenchmarkXZ(b *testing.B) {
	xz, err := exec.LookPath("xz")
	if err != nil {
		b.Skip("xz not installed")
	}
	for _, data := range []string{"text", "random"} {
		for _, preset := range []int{0, 1, 6, 9} {
			b.Run(fmt.Sprintf("%s/preset%d", data, preset), func(b *testing.B) {
				src := benchCorpus(b, data)
				f := filepath.Join(b.TempDir(), "in")
				if err := os.WriteFile(f, src, 0o644); err != nil {
					b.Fatal(err)
				}
				var in, out int64
				var busy time.Duration
				for range b.N {
					cmd := exec.Command(xz, "--format=raw", fmt.Sprintf("--lzma1=preset=%d", preset), "-T1", "-c", f)
					o, err := cmd.Output()
					if err != nil {
						b.Fatal(err)
					}
					busy += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
					in += int64(len(src))
					out += int64(len(o))
				}
				b.ReportMetric(float64(in)/busy.Seconds()/1e6, "cpuMB/s")
				report(b, in, out)
			})
		}
	}
}
