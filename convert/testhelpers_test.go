package convert_test

// Glue between the tests and convert and the round-trip harness
// (convert/internal/roundtrip): builds into files and into memory. The
// helpers that other packages' tests share are convert/internal/convtest's.

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/erofs"
)

var must = roundtrip.Must

// buildImage converts the tar file at src into dir/image.erofs.
func buildImage(t testing.TB, dir, src string, opt convert.Options) (string, *convert.Result) {
	t.Helper()
	in, err := os.Open(src)
	must(t, err)
	defer in.Close()
	img := filepath.Join(dir, "image.erofs")
	out, err := os.Create(img)
	must(t, err)
	defer out.Close()
	res, err := convert.BuildTar(out, in, opt)
	if err != nil {
		t.Fatalf("convert.BuildTar(%s): %v", filepath.Base(src), err)
	}
	return img, res
}

// convertBytes converts the tar file at src and returns the image bytes.
func convertBytes(t testing.TB, src string, opt convert.Options) ([]byte, *convert.Result) {
	t.Helper()
	img, res := buildImage(t, t.TempDir(), src, opt)
	b, err := os.ReadFile(img)
	must(t, err)
	return b, res
}

// detTar is a layer with a bit of everything that needs no root to make:
// sizes across blocks, hard links, symlinks, devices, xattrs shared and
// not, whiteouts, an opaque directory. withImplied adds entries whose
// parents are never listed.
func detTar(t testing.TB, withImplied bool) []byte {
	t1 := time.Unix(1700000000, 0)
	es := []convtest.TarEntry{convtest.TarDir("./", 0o755, t1)}
	for i := 0; i < 40; i++ {
		d := fmt.Sprintf("d%02d/", i%8)
		if i < 8 {
			es = append(es, convtest.TarDir(d, 0o755, t1).PAX("SCHILY.xattr.user.dir", "shared"))
		}
		n := d + fmt.Sprintf("f%03d", i)
		e := convtest.TarFile(n, string(convtest.Content(n, i*797%9000)), 0o644, t1.Add(time.Duration(i%3)*time.Second)).Own(i, i*1000)
		if i%4 == 0 {
			e = e.PAX("SCHILY.xattr.user.shared", "same everywhere").PAX("SCHILY.xattr.user.own", n)
		}
		es = append(es, e)
	}
	es = append(es,
		convtest.TarLink("d00/link", "d01/f001"),
		convtest.TarSym("d00/sym", strings.Repeat("s", 200), t1),
		convtest.TarEntry{Hdr: tar.Header{Typeflag: tar.TypeChar, Name: "d00/null", Mode: 0o666, Devmajor: 1, Devminor: 3, ModTime: t1}},
		convtest.TarEntry{Hdr: tar.Header{Typeflag: tar.TypeBlock, Name: "d00/blk", Mode: 0o660, Devmajor: 259, Devminor: 300000, ModTime: t1}},
		convtest.TarEntry{Hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "d00/fifo", Mode: 0o644, ModTime: t1}},
		convtest.TarFile("d02/.wh.gone", "", 0o644, t1),
		convtest.TarFile("d03/.wh..wh..opq", "", 0o644, t1),
	)
	if withImplied {
		es = append(es, convtest.TarFile("implied/a/b/file", "x", 0o644, t1), convtest.TarFile("d04/implied/c", "c", 0o644, t1))
	}
	return convtest.TarOf(t, es...)
}

// memImage is an io.WriterAt in memory.
type memImage struct{ b []byte }

func (m *memImage) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(m.b) {
		m.b = append(m.b, make([]byte, end-len(m.b))...)
	}
	return copy(m.b[off:], p), nil
}

// buildMem converts in into memory and returns the image, or the error
// (a panic becomes an error, so that a test can report it).
func buildMem(in []byte, opt convert.Options) (img []byte, res *convert.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	var m memImage
	res, err = convert.BuildTar(&m, bytes.NewReader(in), opt)
	return m.b, res, err
}

// readImage opens an image file with the project's reader.
func readImage(t testing.TB, img string) *erofs.Image {
	t.Helper()
	f, err := os.Open(img)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	must(t, err)
	r, err := erofs.Open(f, fi.Size())
	if err != nil {
		t.Fatalf("erofs.Open(%s): %v", img, err)
	}
	return r
}
