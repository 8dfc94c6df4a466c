package mkfs

import (
	"archive/tar"
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/convert"
)

// benchTars are generated once per test binary into a temp dir.
var (
	benchOnce sync.Once
	benchDir  string
	benchErr  error
)

func benchInputs(b *testing.B) string {
	benchOnce.Do(func() {
		benchDir, benchErr = os.MkdirTemp("", "ocierofs-bench-")
		if benchErr != nil {
			return
		}
		if benchErr = writeBenchTar(filepath.Join(benchDir, "big.tar"), bigFileEntries); benchErr != nil {
			return
		}
		benchErr = writeBenchTar(filepath.Join(benchDir, "small.tar"), smallFileEntries)
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchDir
}

func writeBenchTar(name string, fill func(tw *tar.Writer) error) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	tw := tar.NewWriter(bw)
	if err := fill(tw); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	return f.Close()
}

var benchTime = time.Unix(1700000000, 0)

// bigFileEntries: one 256 MiB file of pseudo-random bytes.
func bigFileEntries(tw *tar.Writer) error {
	const size = 256 << 20
	if err := tw.WriteHeader(&tar.Header{Name: "big.bin", Mode: 0o644, Size: size, ModTime: benchTime}); err != nil {
		return err
	}
	r := rand.NewChaCha8([32]byte{1})
	buf := make([]byte, 1<<20)
	for n := 0; n < size; n += len(buf) {
		r.Read(buf)
		if _, err := tw.Write(buf); err != nil {
			return err
		}
	}
	return nil
}

// smallFileEntries: 100,000 files of 128 B … 8 KiB in 100 directories.
func smallFileEntries(tw *tar.Writer) error {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 8192)
	for i := range buf {
		buf[i] = byte('a' + rng.IntN(26))
	}
	for i := 0; i < 100000; i++ {
		size := 128 + rng.IntN(8192-128)
		h := &tar.Header{Name: fmt.Sprintf("d%02d/file%06d.txt", i%100, i), Mode: 0o644, Size: int64(size), ModTime: benchTime}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(buf[:size]); err != nil {
			return err
		}
	}
	return nil
}

func benchMkfs(b *testing.B, input string) {
	dir := benchInputs(b)
	in := filepath.Join(dir, input)
	fi, err := os.Stat(in)
	if err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(b.TempDir(), "out.erofs")
	b.SetBytes(fi.Size())
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Build(out, in, convert.Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if ofi, err := os.Stat(out); err == nil {
		b.ReportMetric(float64(ofi.Size())/float64(fi.Size()), "image/input")
	}
}

// BenchmarkMkfsBigFile: one 256 MiB file (tar input; throughput in tar bytes).
func BenchmarkMkfsBigFile(b *testing.B) { benchMkfs(b, "big.tar") }

// BenchmarkMkfsSmallFiles: 100,000 small files.
func BenchmarkMkfsSmallFiles(b *testing.B) { benchMkfs(b, "small.tar") }
