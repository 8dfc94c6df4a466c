package convert

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/ocierofs/ocierofs/erofs"
)

// memImage is an in-memory io.WriterAt/io.ReaderAt.
type memImage struct{ b []byte }

func (m *memImage) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(m.b) {
		m.b = append(m.b, make([]byte, end-len(m.b))...)
	}
	return copy(m.b[off:], p), nil
}

func (m *memImage) ReadAt(p []byte, off int64) (int, error) {
	return bytes.NewReader(m.b).ReadAt(p, off)
}

func seedTar(f *testing.F, entries func(tw *tar.Writer)) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries(tw)
	tw.Close()
	f.Add(buf.Bytes())
}

// archiveTarFails says whether archive/tar fails on the tar in data (plain,
// gzip or zstd, as BuildTar takes it), reading every entry and its data up
// to the end-of-archive marker: BuildTar must then fail too.
func archiveTarFails(data []byte) bool {
	rc, _, err := Decompress(bytes.NewReader(data))
	if err != nil {
		return false // not a tar stream: BuildTar's own error
	}
	defer rc.Close()
	ref := tar.NewReader(rc)
	ev := readTarEvents(ref.Next, ref, nil)
	return ev[len(ev)-1].err == "error"
}

// FuzzTar feeds arbitrary bytes to the tar path: it must fail cleanly or
// produce an image that our reader walks without error, and fail where
// archive/tar fails.
func FuzzTar(f *testing.F) {
	seedTar(f, func(tw *tar.Writer) {
		tw.WriteHeader(&tar.Header{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755})
		tw.WriteHeader(&tar.Header{Name: "a/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5})
		tw.Write([]byte("hello"))
		tw.WriteHeader(&tar.Header{Name: "a/l", Typeflag: tar.TypeSymlink, Linkname: "f"})
		tw.WriteHeader(&tar.Header{Name: "a/h", Typeflag: tar.TypeLink, Linkname: "a/f"})
		tw.WriteHeader(&tar.Header{Name: "a/.wh.gone", Typeflag: tar.TypeReg})
		tw.WriteHeader(&tar.Header{Name: "b/.wh..wh..opq", Typeflag: tar.TypeReg})
		tw.WriteHeader(&tar.Header{Name: "c", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3,
			PAXRecords: map[string]string{"SCHILY.xattr.user.x": "v"}})
	})
	seedTar(f, func(tw *tar.Writer) {
		tw.WriteHeader(&tar.Header{Name: "dup", Typeflag: tar.TypeReg, Size: 1})
		tw.Write([]byte("1"))
		tw.WriteHeader(&tar.Header{Name: "dup", Typeflag: tar.TypeDir})
		tw.WriteHeader(&tar.Header{Name: "dup/x", Typeflag: tar.TypeFifo})
	})
	f.Add([]byte("not a tar at all"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := &memImage{}
		_, err := BuildTar(m, bytes.NewReader(data), Options{Erofs: erofs.Options{TempDir: t.TempDir()}})
		if err != nil {
			return
		}
		if archiveTarFails(data) {
			t.Fatal("BuildTar accepts a tar that archive/tar refuses")
		}
		img, err := erofs.Open(m, int64(len(m.b)))
		if err != nil {
			t.Fatalf("image of an accepted tar does not open: %v", err)
		}
		err = fs.WalkDir(img, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() {
				_, err = img.ReadFile(p)
			}
			return err
		})
		if err != nil {
			t.Fatalf("image of an accepted tar does not read back: %v", err)
		}
	})
}

// FuzzTarFile: a tar read from a file with pread, the workers reading the
// data of its files, gives what the same bytes read as a stream give: both
// fail, or both make the same image; both fail where archive/tar fails.
func FuzzTarFile(f *testing.F) {
	seedTar(f, func(tw *tar.Writer) {
		tw.WriteHeader(&tar.Header{Name: "a/", Typeflag: tar.TypeDir, Mode: 0o755})
		tw.WriteHeader(&tar.Header{Name: "a/f", Typeflag: tar.TypeReg, Mode: 0o644, Size: 700})
		tw.Write(bytes.Repeat([]byte("hello "), 700/6+1)[:700])
		tw.WriteHeader(&tar.Header{Name: "a/h", Typeflag: tar.TypeLink, Linkname: "a/f"})
		tw.WriteHeader(&tar.Header{Name: "b", Typeflag: tar.TypeReg, Size: 3, PAXRecords: map[string]string{"path": "long/" + string(bytes.Repeat([]byte("x"), 120))}})
		tw.Write([]byte("abc"))
	})
	f.Add([]byte("not a tar at all"))
	defer func(n int64) { laterData = n }(laterData)
	laterData = 1 // every file with data goes to the workers
	f.Fuzz(func(t *testing.T, data []byte) {
		opt := Options{NoDiffID: true}
		opt.Erofs.UUID = [16]byte{9}
		opt.Erofs.Workers = 2
		opt.Erofs.NoDedupe = true
		opt.Erofs.TempDir = t.TempDir()
		opt.Erofs.Compression = &erofs.Compression{Algorithm: erofs.AlgLZ4, MaxExtent: 16 << 10}
		stream := &memImage{}
		_, serr := BuildTar(stream, bytes.NewReader(data), opt)
		p := filepath.Join(opt.Erofs.TempDir, "in.tar")
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		in, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		file := &memImage{}
		_, ferr := BuildTar(file, in, opt)
		if (serr == nil) != (ferr == nil) {
			t.Fatalf("stream: %v; file: %v", serr, ferr)
		}
		if serr == nil && !bytes.Equal(stream.b, file.b) {
			t.Fatalf("the file's image differs from the stream's (%d vs %d bytes)", len(file.b), len(stream.b))
		}
		if serr == nil && archiveTarFails(data) {
			t.Fatal("BuildTar accepts a tar that archive/tar refuses")
		}
	})
}
