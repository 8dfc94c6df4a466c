package convert

import (
	"archive/tar"
	"bytes"
	"io/fs"
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

// FuzzTar feeds arbitrary bytes to the tar path: it must fail cleanly or
// produce an image that our reader walks without error.
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
