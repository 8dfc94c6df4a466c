package erofs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"testing"
)

// dataAtFiles are sizes around the input window (256 KiB) and the segment
// (4 MiB), with text, random bytes and zeros in runs.
func dataAtFiles() [][]byte {
	rng := rand.New(rand.NewPCG(7, 11))
	var files [][]byte
	for _, n := range []int{100 << 10, 256<<10 + 1, 5<<20 + 7, 8 << 20} {
		b := make([]byte, 0, n)
		for len(b) < n {
			k := rng.IntN(200<<10) + 1
			switch rng.IntN(3) {
			case 0:
				for range k {
					b = append(b, "abcdefgh pcluster\n"[rng.IntN(18)])
				}
			case 1:
				for range k {
					b = append(b, byte(rng.Uint32()))
				}
			default:
				b = append(b, make([]byte, k)...)
			}
		}
		files = append(files, b[:n])
	}
	return files
}

// buildDataFiles builds an image of files, each given by data(i).
func buildDataFiles(t *testing.T, opt Options, files [][]byte, data func(i int) io.Reader) ([]byte, error) {
	t.Helper()
	w := &memWriterAt{}
	b, err := NewBuilder(w, opt)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		e := Entry{Path: fmt.Sprintf("f%d", i), Mode: S_IFREG | 0o644, Size: int64(len(f))}
		if err := b.Add(e, data(i)); err != nil {
			return nil, err
		}
	}
	if err := b.Finish(); err != nil {
		return nil, err
	}
	return w.b, nil
}

// TestDataAtSameImage: files given as DataAt, read by the workers a window
// or a segment at a time, make the image a reader of the same bytes makes,
// for every worker count; and the kernel reads them back.
func TestDataAtSameImage(t *testing.T) {
	files := dataAtFiles()
	all := bytes.Join(files, nil)
	offs := make([]int64, len(files))
	for i := range files[1:] {
		offs[i+1] = offs[i] + int64(len(files[i]))
	}
	for _, c := range []struct {
		name string
		comp Compression
	}{
		{"lz4-64k-extents", Compression{Algorithm: AlgLZ4, MaxExtent: 64 << 10}},
		{"lz4-default-extents", Compression{Algorithm: AlgLZ4}},
		{"zstd-dedupe-fragments", Compression{Algorithm: AlgZstd, Level: 3, MaxExtent: 16 << 10, Dedupe: true, Fragments: true}},
		{"deflate-tailpacking", Compression{Algorithm: AlgDeflate, Level: 6, MaxExtent: 256 << 10, TailPacking: true, PclusterSize: 16 << 10}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := Options{Workers: 1, NoDedupe: true, Compression: &c.comp}
			want, err := buildDataFiles(t, opt, files, func(i int) io.Reader { return bytes.NewReader(files[i]) })
			if err != nil {
				t.Fatal(err)
			}
			for _, workers := range []int{1, 3} {
				opt.Workers = workers
				comp := c.comp
				opt.Compression = &comp
				got, err := buildDataFiles(t, opt, files, func(i int) io.Reader {
					return DataAt(bytes.NewReader(all), offs[i], int64(len(files[i])))
				})
				if err != nil {
					t.Fatalf("%d workers: %v", workers, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%d workers: DataAt gives another image (%d vs %d bytes)", workers, len(got), len(want))
				}
			}
			m := map[string][]byte{}
			for i, f := range files {
				m[fmt.Sprintf("f%d", i)] = f
			}
			mountCompare(t, want, m)
		})
	}
}

// TestDataAtShortRead: data that ends before its size, found by the worker
// reading it, fails the build with the entry's name.
func TestDataAtShortRead(t *testing.T) {
	files := dataAtFiles()
	for _, maxExtent := range []int{64 << 10, 0} {
		for _, workers := range []int{1, 2} {
			opt := Options{Workers: workers, NoDedupe: true, Compression: &Compression{Algorithm: AlgLZ4, MaxExtent: maxExtent}}
			_, err := buildDataFiles(t, opt, files, func(i int) io.Reader {
				if i == 2 {
					// 5 MiB of data promised, 4.5 MiB there.
					return DataAt(bytes.NewReader(files[i][:9<<19]), 0, int64(len(files[i])))
				}
				return bytes.NewReader(files[i])
			})
			// Found when f3 is added or at Finish, the error names f2 alone.
			want := `erofs: entry "f2": data ends after 4718592 of 5242887 bytes: unexpected EOF`
			var ee *EntryError
			if err == nil || err.Error() != want || !errors.As(err, &ee) || ee.Path != "f2" {
				t.Errorf("max extent %d, %d workers: got %v, want %s", maxExtent, workers, err, want)
			}
		}
	}
}

// TestDataAtFile: DataAt over an *os.File, as mkfs gives a tar file's data.
func TestDataAtFile(t *testing.T) {
	files := dataAtFiles()[:3]
	f, err := os.CreateTemp(t.TempDir(), "data")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var offs []int64
	off := int64(0)
	for _, b := range files {
		offs = append(offs, off)
		f.Write(b)
		off += int64(len(b))
	}
	opt := Options{Workers: 2, NoDedupe: true, Compression: &Compression{Algorithm: AlgLZ4, MaxExtent: 64 << 10}}
	want, err := buildDataFiles(t, opt, files, func(i int) io.Reader { return bytes.NewReader(files[i]) })
	if err != nil {
		t.Fatal(err)
	}
	got, err := buildDataFiles(t, opt, files, func(i int) io.Reader { return DataAt(f, offs[i], int64(len(files[i]))) })
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("DataAt over a file: %v; same image: %v", err, bytes.Equal(got, want))
	}
}
