package convert_test

import (
	"archive/tar"
	"bytes"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/convert/mkfs"
	"github.com/ocierofs/ocierofs/erofs"
)

// bigFilesTar is a tar whose files straddle the sizes where a plain tar
// file's data goes to the workers (64 KiB), where a worker's input window
// ends (256 KiB) and where segments end (4 MiB), with text, random bytes
// and runs of zeros, a long (PAX) name and a hard link to a big file.
func bigFilesTar(t testing.TB) (data []byte, files map[string][]byte) {
	rng := rand.New(rand.NewPCG(3, 5))
	text := func(n int) []byte {
		words := []string{"erofs ", "pcluster ", "whiteout ", "diffID\n", "lcluster ", "nid "}
		var b bytes.Buffer
		for b.Len() < n {
			b.WriteString(words[rng.IntN(len(words))])
		}
		return b.Bytes()[:n]
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	mixed := func(n int) []byte {
		var b []byte
		for len(b) < n {
			switch rng.IntN(3) {
			case 0:
				b = append(b, text(rng.IntN(300<<10)+1)...)
			case 1:
				b = append(b, random(rng.IntN(200<<10)+1)...)
			default:
				b = append(b, make([]byte, rng.IntN(100<<10)+1)...)
			}
		}
		return b[:n]
	}
	files = map[string][]byte{
		"small.txt":                              text(3000),
		"just-below":                             text(64<<10 - 1),
		"at-64k":                                 text(64 << 10),
		"window-plus-one":                        mixed(256<<10 + 1),
		"random-1m":                              random(1 << 20),
		"segments/three":                         mixed(9<<20 + 123),
		"segments/exact":                         mixed(8 << 20),
		strings.Repeat("long-name/", 12) + "big": mixed(300 << 10),
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if d := filepath.Dir(name); d != "." && !dirs[d] {
			dirs[d] = true
			must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, Format: tar.FormatPAX}))
		}
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(files[name])), Format: tar.FormatPAX}))
		_, err := tw.Write(files[name])
		must(t, err)
	}
	must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeLink, Name: "hardlink", Linkname: "segments/three", Format: tar.FormatPAX}))
	files["hardlink"] = files["segments/three"]
	must(t, tw.Close())
	return buf.Bytes(), files
}

// TestTarFileData: a plain tar file with no diffID to hash is read with
// pread and the workers read its big files' data; the image is the one a
// stream of the same tar gives, for every codec and worker count, and the
// kernel reads the files back.
func TestTarFileData(t *testing.T) {
	dir := roundtrip.WorkDir(t)
	in, files := bigFilesTar(t)
	path := filepath.Join(dir, "big.tar")
	must(t, os.WriteFile(path, in, 0o644))
	for _, c := range []struct {
		name string
		comp *erofs.Compression
	}{
		{"none", nil},
		{"lz4", &erofs.Compression{Algorithm: erofs.AlgLZ4, MaxExtent: 64 << 10}},
		{"zstd-fragments", &erofs.Compression{Algorithm: erofs.AlgZstd, Level: 3, Fragments: true, TailPacking: true}},
		{"deflate-dedupe", &erofs.Compression{Algorithm: erofs.AlgDeflate, Level: 6, Dedupe: true, MaxExtent: 32 << 10}},
		{"lzma-64k", &erofs.Compression{Algorithm: erofs.AlgLZMA, MaxExtent: 128 << 10, PclusterSize: 64 << 10}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := convert.Options{NoDiffID: true}
			opt.Erofs.UUID = [16]byte{1, 2, 3}
			opt.Erofs.Compression = c.comp
			// Whole-file dedupe hashes the data as it is read: the caller
			// reads it then. One case keeps it.
			opt.Erofs.NoDedupe = c.name != "deflate-dedupe"
			opt.Erofs.Workers = 1
			// The stream: archive/tar reads every byte.
			want := buildStream(t, in, opt)
			for _, workers := range []int{1, 3} {
				opt.Erofs.Workers = workers
				img := filepath.Join(roundtrip.WorkDir(t), "image.erofs")
				if _, err := mkfs.Build(img, path, opt); err != nil {
					t.Fatalf("Mkfs, %d workers: %v", workers, err)
				}
				got, err := os.ReadFile(img)
				must(t, err)
				if !bytes.Equal(got, want) {
					t.Fatalf("%d workers: the tar file's image differs from the stream's (%d vs %d bytes)", workers, len(got), len(want))
				}
				if why := roundtrip.NoMount(); workers == 3 && why != "" {
					t.Logf("kernel read skipped: %s", why)
				} else if workers == 3 {
					mnt := roundtrip.Mount(t, img)
					for name, data := range files {
						b, err := os.ReadFile(filepath.Join(mnt, name))
						if err != nil || !bytes.Equal(b, data) {
							t.Errorf("%s: the kernel reads %d bytes (%v), want the %d of the tar", name, len(b), err, len(data))
						}
					}
				}
			}
		})
	}
}

func buildStream(t *testing.T, in []byte, opt convert.Options) []byte {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "stream.erofs"))
	must(t, err)
	defer out.Close()
	// A bytes.Reader is no *os.File: the tar is read as a stream.
	if _, err := convert.BuildTar(out, bytes.NewReader(in), opt); err != nil {
		t.Fatalf("BuildTar of the stream: %v", err)
	}
	b, err := os.ReadFile(out.Name())
	must(t, err)
	return b
}

// TestTarFileTruncated: a tar file cut inside a big file's data fails with
// the entry's name, leaving no image, whatever reads the data.
func TestTarFileTruncated(t *testing.T) {
	dir := t.TempDir()
	in, files := bigFilesTar(t)
	// Cut in the middle of segments/three: its header is followed by its
	// data, so the first occurrence of its first bytes is the data.
	at := bytes.Index(in, files["segments/three"][:4096])
	if at < 0 {
		t.Fatal("no data of segments/three in the tar")
	}
	path := filepath.Join(dir, "cut.tar")
	must(t, os.WriteFile(path, in[:at+5<<20], 0o644))
	for _, workers := range []int{1, 2} {
		opt := convert.Options{NoDiffID: true}
		opt.Erofs.UUID = [16]byte{1}
		opt.Erofs.Compression = &erofs.Compression{Algorithm: erofs.AlgLZ4, MaxExtent: 64 << 10}
		opt.Erofs.Workers = workers
		opt.Erofs.NoDedupe = true
		img := filepath.Join(dir, "cut.erofs")
		_, err := mkfs.Build(img, path, opt)
		if err == nil || !strings.Contains(err.Error(), "segments/three") {
			t.Errorf("%d workers: got %v, want an error naming segments/three", workers, err)
		}
		if _, serr := os.Stat(img); serr == nil {
			t.Errorf("%d workers: an image was left behind", workers)
		}
	}
}
