package deflate

import (
	"archive/tar"
	"errors"
	"hash/fnv"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkTar compresses the regular files of a tar the way an EROFS
// image with 4 KiB pclusters and 64 KiB extents does (each file cut into
// extents of at most 64 KiB, each call given the rest of its extent and
// one block), one operation all of them. Besides MB/s it reports "img",
// the files' bytes over the image bytes they would take, and it logs the
// bytes written and a hash of them, to check that a change keeps the
// output. It runs only when asked:
//
//	DEFLATE_TAR=/var/tmp/ocierofs-bench/tar/small100k.tar GOMAXPROCS=1 taskset -c 0 \
//	    go test -run '^$' -bench Tar -count 3 -v ./erofs/compress/deflate/
//
// DEFLATE_TAR_MB bounds the file bytes read (default 64), DEFLATE_LEVEL
// sets the level, and DEFLATE_PARAMS=chain,good,lazy,nice overrides the
// level's match finder parameters (to tune them).
func BenchmarkTar(b *testing.B) {
	name := os.Getenv("DEFLATE_TAR")
	if name == "" {
		b.Skip("set DEFLATE_TAR to a tar file to measure")
	}
	limit := 64 << 20
	if s := os.Getenv("DEFLATE_TAR_MB"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		limit = n << 20
	}
	files, err := tarFiles(name, limit)
	if err != nil {
		b.Fatal(err)
	}
	level := LevelDefault
	if s := os.Getenv("DEFLATE_LEVEL"); s != "" {
		level, _ = strconv.Atoi(s)
	}
	e, err := NewEncoder(level)
	if err != nil {
		b.Fatal(err)
	}
	if s := os.Getenv("DEFLATE_PARAMS"); s != "" {
		// chain,good,lazy,nice: try other match finder parameters.
		var v [4]int
		for k, f := range strings.Split(s, ",") {
			v[k], _ = strconv.Atoi(f)
		}
		e.p.chain, e.p.good, e.p.lazy, e.p.nice = v[0], v[1], v[2], v[3]
	}
	size := 0
	for _, f := range files {
		size += len(f)
	}
	dst := make([]byte, 4096)
	sum := fnv.New64a()
	var in, img, out int
	b.SetBytes(int64(size))
	for range b.N {
		in, img, out = 0, 0, 0
		sum.Reset()
		for _, f := range files {
			for pos := 0; pos < len(f); {
				win := f[pos:min(pos+64<<10, len(f))]
				w, c := e.CompressDestSize(dst, win)
				sum.Write(dst[:w])
				out += w
				nblk := (w + 4095) / 4096
				if c == 0 || nblk*4096 >= c {
					// No block saved: plain blocks.
					n := min(max(1, c/4096)*4096, len(win))
					pos, in, img = pos+n, in+n, img+(n+4095)/4096*4096
					continue
				}
				pos, in, img = pos+c, in+c, img+nblk*4096
			}
		}
	}
	b.ReportMetric(float64(in)/float64(img), "img")
	b.Logf("%d files, %d bytes: image %d bytes, output %d bytes %x", len(files), in, img, out, sum.Sum64())
}

// tarFiles reads the contents of a tar's regular files, up to limit bytes.
func tarFiles(name string, limit int) ([][]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := tar.NewReader(f)
	var files [][]byte
	total := 0
	for total < limit {
		h, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg || h.Size == 0 {
			continue
		}
		b, err := io.ReadAll(r)
		if err != nil {
			return nil, err
		}
		b = b[:min(len(b), limit-total)]
		files = append(files, b)
		total += len(b)
	}
	return files, nil
}
