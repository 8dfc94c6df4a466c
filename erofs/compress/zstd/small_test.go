package zstd

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Small files, as a tar of many of them gives an EROFS writer: each file
// is its own extent, compressed into 4 KiB pclusters until it is used up.
//
//	GOMAXPROCS=1 taskset -c 0 go test -run '^$' -bench SmallFiles -count 5 ./erofs/compress/zstd/
//
// The inputs are the first files of ZSTD_SMALLDIR (a tree of files, such
// as erofsbench's small100k) when set, else 4000 files drawn like
// small100k's: 128 B to 8 KiB, three in four slices of Go source, the
// rest random bytes.

var (
	smallOnce  bool
	smallFiles [][]byte
)

func smallCorpus(tb testing.TB) [][]byte {
	if smallOnce {
		return smallFiles
	}
	smallOnce = true
	if dir := os.Getenv("ZSTD_SMALLDIR"); dir != "" {
		var names []string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				names = append(names, p)
			}
			return nil
		})
		sort.Strings(names)
		for _, n := range names[:min(len(names), 20000)] {
			b, err := os.ReadFile(n)
			if err != nil {
				tb.Fatal(err)
			}
			smallFiles = append(smallFiles, b)
		}
		return smallFiles
	}
	pool := text()
	rng := rand.New(rand.NewPCG(7, 11))
	for i := range 4000 {
		n := 128 + rng.IntN(8192-128+1)
		if rng.IntN(4) != 0 {
			off := rng.IntN(len(pool) - n)
			smallFiles = append(smallFiles, pool[off:off+n])
		} else {
			smallFiles = append(smallFiles, randomData(n, uint64(100+i)))
		}
	}
	return smallFiles
}

// compressFile compresses one file as pclusters of len(dst) bytes from
// extents of at most 64 KiB and returns the input and output bytes (an
// input no pcluster takes is counted as stored).
func compressFile(e *Encoder, dst, f []byte) (in, out int) {
	for pos := 0; pos < len(f); {
		w, c := e.CompressDestSize(dst, f[pos:min(len(f), pos+maxExtent)])
		if c == 0 {
			c = min(len(dst), len(f)-pos)
			w = c
		}
		pos += c
		out += w
	}
	return len(f), out
}

func BenchmarkSmallFiles(b *testing.B) {
	files := smallCorpus(b)
	e, _ := NewEncoder(1, WithWindow(64<<10))
	dst := make([]byte, 4096)
	in, out := 0, 0
	// CPU time of this thread: on a shared machine it varies less than
	// wall time.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ru0, ru1 unix.Rusage
	b.ResetTimer()
	unix.Getrusage(unix.RUSAGE_THREAD, &ru0)
	for range b.N {
		for _, f := range files {
			i, o := compressFile(e, dst, f)
			in += i
			out += o
		}
	}
	unix.Getrusage(unix.RUSAGE_THREAD, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	report(b, in, out)
	b.ReportMetric(float64(in)/cpu.Seconds()/1e6, "cpuMB/s")
	b.ReportMetric(float64(out)/float64(b.N), "B/pass")
}

// TestSmallFiles round-trips the small-file corpus at level 1 and 3.
func TestSmallFiles(t *testing.T) {
	files := smallCorpus(t)
	if testing.Short() {
		files = files[:min(len(files), 500)]
	}
	for _, lv := range []int{1, 3} {
		e, _ := NewEncoder(lv, WithWindow(64<<10))
		for _, f := range files {
			for pos := 0; pos < len(f); {
				_, c := roundTrip(t, e, f[pos:], 4096)
				if c == 0 {
					t.Fatalf("L%d: nothing fits from %d bytes", lv, len(f)-pos)
				}
				pos += c
			}
		}
	}
}
