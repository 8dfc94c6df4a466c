package overlaydata_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/convert/overlaydata"
	"github.com/ocierofs/ocierofs/erofs"
)

// BenchmarkSplit splits an image of 2,000 files of 1 to 64 KiB in 40
// directories, one in eight a copy of another's content; it reports the
// source image's bytes per second.
func BenchmarkSplit(b *testing.B) {
	dir := b.TempDir()
	src := filepath.Join(dir, "src.erofs")
	f, err := os.Create(src)
	must(b, err)
	bld, err := erofs.NewBuilder(f, erofs.Options{})
	must(b, err)
	r := rand.New(rand.NewPCG(1, 2))
	var total int64
	var prev []byte
	for i := range 2000 {
		data := prev
		if i%8 != 0 || prev == nil {
			data = make([]byte, 1024+r.IntN(63<<10))
			for j := range data {
				data[j] = byte(r.Uint32())
			}
		}
		prev = data
		total += int64(len(data))
		e := erofs.Entry{Path: fmt.Sprintf("d%02d/f%04d", i%40, i), Mode: erofs.S_IFREG | 0o644, Mtime: time.Unix(0, 0), Size: int64(len(data))}
		must(b, bld.Add(e, bytes.NewReader(data)))
	}
	must(b, bld.Finish())
	bld.Close()
	f.Close()
	b.SetBytes(total)
	b.ResetTimer()
	for range b.N {
		_, err := overlaydata.Split(src, filepath.Join(dir, "meta.erofs"), filepath.Join(dir, "data.erofs"), erofs.Options{TempDir: dir})
		must(b, err)
	}
}
