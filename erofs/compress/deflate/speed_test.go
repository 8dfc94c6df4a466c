package deflate

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"syscall"
	"testing"
	"time"

	kflate "github.com/klauspost/compress/flate"
)

// TestSpeedTable prints MB per CPU second and ratios of this encoder, of
// erofs-utils' bisection over klauspost flate, and of the plain klauspost
// encoder on the pieces this encoder consumed — all in one run, medians
// of 3. CPU time (getrusage) rather than wall time, because the machines
// this runs on are shared. It runs only when asked:
//
//	DEFLATE_SPEED=/path/to/source.bin GOMAXPROCS=1 taskset -c 1 \
//	    go test -run TestSpeedTable -v ./erofs/compress/deflate/
//
// DEFLATE_SPEED=go uses GOROOT's Go sources. 16 MiB of text (sampled in 16
// pieces spread over the file) and 16 MiB of random bytes.
func TestSpeedTable(t *testing.T) {
	name := os.Getenv("DEFLATE_SPEED")
	if name == "" {
		t.Skip("set DEFLATE_SPEED to a text file (or go) to measure")
	}
	text := goSource(16 << 20)
	if name != "go" {
		var err error
		if text, err = sampleFile(name, 16<<20); err != nil {
			t.Fatal(err)
		}
	}
	corpora := []struct {
		name string
		data []byte
	}{{"text", text}, {"random", randomBytes(16<<20, 5)}}
	t.Logf("%-7s %-6s %-16s %9s %8s %8s", "data", "budget", "method", "MB/cpu-s", "ratio", "img")
	for _, c := range corpora {
		for _, budget := range []int{4096, 65536} {
			for _, level := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9} {
				e, _ := NewEncoder(level)
				speedRow(t, c.name, budget, fmt.Sprintf("own L%d", level), func() (int, int, int) {
					return passDestSize(e, c.data, budget)
				})
			}
			for _, level := range []int{1, 6} {
				speedRow(t, c.name, budget, fmt.Sprintf("bisect L%d", level), func() (int, int, int) {
					return passDestSize(newBisect(level), c.data, budget)
				})
			}
			for _, level := range []int{1, 6, 9} {
				e, _ := NewEncoder(level)
				var pieces []int
				dst := make([]byte, budget)
				for pos := 0; pos < len(c.data); {
					_, n := e.CompressDestSize(dst, c.data[pos:min(len(c.data), pos+1<<20)])
					pieces, pos = append(pieces, n), pos+n
				}
				var buf bytes.Buffer
				w, _ := kflate.NewWriter(&buf, level)
				speedRow(t, c.name, budget, fmt.Sprintf("klauspost L%d", level), func() (int, int, int) {
					in, out, pos := 0, 0, 0
					for _, n := range pieces {
						buf.Reset()
						w.Reset(&buf)
						w.Write(c.data[pos : pos+n])
						w.Close()
						in, out, pos = in+n, out+buf.Len(), pos+n
					}
					return in, out, 0
				})
			}
		}
	}
}

// passDestSize compresses all of src in 1 MiB windows and returns input,
// output bytes and output 4 KiB blocks.
func passDestSize(enc destSizer, src []byte, budget int) (in, out, blocks int) {
	dst := make([]byte, budget)
	for pos := 0; pos < len(src); {
		w, c := enc.CompressDestSize(dst, src[pos:min(len(src), pos+1<<20)])
		if c == 0 {
			panic("nothing consumed")
		}
		in, out, pos = in+c, out+w, pos+c
		blocks += (w + 4095) / 4096
	}
	return in, out, blocks
}

func speedRow(t *testing.T, data string, budget int, method string, run func() (in, out, blocks int)) {
	var speeds []float64
	var in, out, blocks int
	for range 3 {
		t0 := cpuTime()
		in, out, blocks = run()
		speeds = append(speeds, float64(in)/(cpuTime()-t0).Seconds()/1e6)
	}
	slices.Sort(speeds)
	img := "-"
	if blocks > 0 {
		img = fmt.Sprintf("%.4f", float64(in)/float64(blocks*4096))
	}
	t.Logf("%-7s %-6s %-16s %9.1f %8.4f %8s", data, fmt.Sprintf("%dK", budget>>10), method, speeds[1], float64(in)/float64(out), img)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
