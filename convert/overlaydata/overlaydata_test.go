package overlaydata_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/convert/overlaydata"
	"github.com/ocierofs/ocierofs/erofs"
)

// source writes an image of every kind of file: two files of the same
// content, a hard link, an empty file, a large file, a symlink, a device,
// xattrs on a file and a directory.
func source(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "src.erofs")
	f, err := os.Create(p)
	must(t, err)
	defer f.Close()
	b, err := erofs.NewBuilder(f, erofs.Options{})
	must(t, err)
	defer b.Close()
	mt := time.Unix(1_700_000_000, 5)
	big := bytes.Repeat([]byte("0123456789abcdef"), 20_000)
	for _, e := range []struct {
		e    erofs.Entry
		data []byte
	}{
		{erofs.Entry{Path: ".", Mode: erofs.S_IFDIR | 0o755, Mtime: mt}, nil},
		{erofs.Entry{Path: "etc", Mode: erofs.S_IFDIR | 0o750, Uid: 3, Mtime: mt, Xattrs: []erofs.Xattr{{Name: "user.dir", Value: []byte("d")}}}, nil},
		{erofs.Entry{Path: "etc/a", Mode: erofs.S_IFREG | 0o640, Uid: 7, Gid: 8, Mtime: mt, Size: 6, Xattrs: []erofs.Xattr{{Name: "user.k", Value: []byte("v")}}}, []byte("hello\n")},
		{erofs.Entry{Path: "etc/same", Mode: erofs.S_IFREG | 0o600, Mtime: mt, Size: 6}, []byte("hello\n")},
		{erofs.Entry{Path: "etc/empty", Mode: erofs.S_IFREG | 0o644, Mtime: mt}, nil},
		{erofs.Entry{Path: "big", Mode: erofs.S_IFREG | 0o755, Mtime: mt, Size: int64(len(big))}, big},
		{erofs.Entry{Path: "big.link", HardLink: "big"}, nil},
		{erofs.Entry{Path: "ln", Mode: erofs.S_IFLNK | 0o777, Mtime: mt, Linkname: "etc/a"}, nil},
		{erofs.Entry{Path: "null", Mode: erofs.S_IFCHR | 0o666, Mtime: mt, Devmajor: 1, Devminor: 3}, nil},
	} {
		must(t, b.Add(e.e, bytes.NewReader(e.data)))
	}
	must(t, b.Finish())
	return p
}

// TestSplit: the metadata layer holds no file data; each distinct
// content is once in the data layer, at the DataPath of its digest; and
// mounted as overlayfs with the data layer a data-only lower layer, the
// two show the source's tree, contents read through the redirects.
func TestSplit(t *testing.T) {
	src := source(t)
	dir := t.TempDir()
	meta, data := filepath.Join(dir, "meta.erofs"), filepath.Join(dir, "data.erofs")
	res, err := overlaydata.Split(src, meta, data, erofs.Options{UUID: [16]byte{1}})
	must(t, err)
	if res.Payloads != 2 || res.DuplicateBytes != 6 || res.PayloadBytes != 6+320_000 {
		t.Errorf("result %+v: want 2 payloads of 320006 bytes, 6 bytes duplicate", res)
	}
	if fi, err := os.Stat(meta); err != nil || fi.Size() > 16<<10 {
		t.Errorf("metadata layer: %v, %v: want no file data in it", fi.Size(), err)
	}

	dimg := open(t, data)
	sum := sha256.Sum256([]byte("hello\n"))
	p := overlaydata.DataPath(hex.EncodeToString(sum[:]))
	if got, err := dimg.ReadFile(p); err != nil || string(got) != "hello\n" {
		t.Errorf("data layer %s: %q, %v", p, got, err)
	}
	mimg := open(t, meta)
	xs, err := mimg.Xattrs("etc/same")
	must(t, err)
	want := map[string]string{overlaydata.MetacopyXattr: "", overlaydata.RedirectXattr: "/" + p}
	for _, x := range xs {
		if w, ok := want[x.Name]; ok && w == string(x.Value) {
			delete(want, x.Name)
		}
	}
	if len(want) != 0 {
		t.Errorf("etc/same: xattrs %v lack %v", xs, want)
	}

	if testing.Short() {
		t.Skip("-short: no mounts")
	}
	srcTree := convtest.TreeFromDir(t, roundtrip.Mount(t, src))
	got := convtest.TreeFromDir(t, convtest.MountOverlayData(t, meta, data))
	convtest.ReportDiff(t, "overlay-data mount vs source", fstree.Diff(srcTree, got, fstree.DiffOptions{}))
	if n := got.Node("big"); n == nil || n.Size != 320_000 {
		t.Errorf("big through the overlay: %+v", n)
	}
}

// TestSplitWithoutDataLayer: mounted alone, the metadata layer's files
// have their size but read as zeros (holes): their data is only in the
// data layer.
func TestSplitWithoutDataLayer(t *testing.T) {
	src := source(t)
	dir := t.TempDir()
	meta, data := filepath.Join(dir, "meta.erofs"), filepath.Join(dir, "data.erofs")
	_, err := overlaydata.Split(src, meta, data, erofs.Options{})
	must(t, err)
	b, err := open(t, meta).ReadFile("etc/a")
	must(t, err)
	if !bytes.Equal(b, make([]byte, 6)) {
		t.Errorf("etc/a in the metadata layer: %q, want six zeros", b)
	}
	if strings.Count(string(b), "h") != 0 {
		t.Error("data in the metadata layer")
	}
}

func open(t *testing.T, p string) *erofs.Image {
	t.Helper()
	f, err := os.Open(p)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	fi, err := f.Stat()
	must(t, err)
	img, err := erofs.Open(f, fi.Size())
	must(t, err)
	return img
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
