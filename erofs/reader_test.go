package erofs

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// The fixtures are made by testdata/mkfixtures.sh with Debian's mkfs.erofs
// 1.5; the expectations below restate what that script builds.

const fixtureTime = 1700000000

// pattern mirrors the script's pattern(): n deterministic bytes.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func openBytes(t testing.TB, b []byte, opts ...OpenOption) *Image {
	t.Helper()
	img, err := Open(bytes.NewReader(b), int64(len(b)), opts...)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return img
}

func openFixture(t testing.TB, name string, opts ...OpenOption) *Image {
	t.Helper()
	return openBytes(t, readFixture(t, name), opts...)
}

func TestReaderSuper(t *testing.T) {
	for _, name := range []string{"plain.img", "chunk.img", "blob.img"} {
		t.Run(name, func(t *testing.T) {
			raw := readFixture(t, name)
			img := openBytes(t, raw)
			sb := img.Super()
			if !sb.ChecksumOK {
				t.Errorf("ChecksumOK = false")
			}
			if got, want := superChecksum(raw[:4096], 4096), le.Uint32(raw[SuperOffset+4:]); got != want || sb.Checksum != want {
				t.Errorf("superChecksum = %#x, Checksum = %#x, stored %#x", got, sb.Checksum, want)
			}
			if sb.BlockSize != 4096 || sb.Epoch != fixtureTime || sb.FixedNsec != 0 {
				t.Errorf("BlockSize %d Epoch %d FixedNsec %d", sb.BlockSize, sb.Epoch, sb.FixedNsec)
			}
			if sb.FeatureCompat&(FeatureCompatSBChksum|FeatureCompatMtime) != FeatureCompatSBChksum|FeatureCompatMtime {
				t.Errorf("FeatureCompat %#x", sb.FeatureCompat)
			}
			if sb.Blocks*4096 != uint64(len(raw)) {
				t.Errorf("Blocks %d for %d bytes", sb.Blocks, len(raw))
			}
			if got := hex.EncodeToString(sb.UUID[:]); got != "11111111222233334444555555555555" {
				t.Errorf("UUID %s", got)
			}
			if img.Root().Nid != sb.RootNid {
				t.Errorf("root nid %d, super says %d", img.Root().Nid, sb.RootNid)
			}

			// A flipped byte inside the checksummed region is noticed but
			// does not stop Open.
			bad := bytes.Clone(raw)
			bad[4000] ^= 1
			if openBytes(t, bad).Super().ChecksumOK {
				t.Errorf("corrupted image: ChecksumOK = true")
			}
		})
	}
	sb := openFixture(t, "plain.img").Super()
	if sb.RootNid != 37 || sb.Inos != 21 || sb.FeatureIncompat != 0 || sb.ExtraDevices != 0 {
		t.Errorf("plain.img: %+v", sb)
	}
	if sb := openFixture(t, "chunk.img").Super(); sb.FeatureIncompat != FeatureIncompatChunkedFile {
		t.Errorf("chunk.img: FeatureIncompat %#x", sb.FeatureIncompat)
	}
	if sb := openFixture(t, "blob.img").Super(); sb.ExtraDevices != 1 || sb.DevtSlotOff != 9 ||
		sb.FeatureIncompat != FeatureIncompatChunkedFile|FeatureIncompatDeviceTable {
		t.Errorf("blob.img: %+v", sb)
	}
}

// wantInode is what one path of plain.img must look like.
type wantInode struct {
	path     string
	mode     uint32
	uid, gid uint32
	size     int64
	nlink    uint32
	compact  bool
	layout   uint8
	data     []byte // content of regular files
	target   string // symlink target
	major    uint32
	minor    uint32
	xattrs   []Xattr
}

var longTarget = strings.Repeat("./", 1495) + "inline.txt"

var aclAccess, _ = hex.DecodeString("0200000001000600ffffffff02000400d204000004000400ffffffff10000400ffffffff20000400ffffffff")

var plainWant = []wantInode{
	{path: ".", mode: S_IFDIR | 0o755, size: 339, nlink: 6, compact: true, layout: LayoutFlatInline},
	{path: "hello.txt", mode: S_IFREG | 0o640, uid: 1000, gid: 1000, size: 12, nlink: 2, compact: true,
		layout: LayoutFlatInline, data: []byte("hello world\n"),
		xattrs: []Xattr{{"user.foo", []byte("bar")}, {"user.shared", []byte("same")}}},
	{path: "hardlink", mode: S_IFREG | 0o640, uid: 1000, gid: 1000, size: 12, nlink: 2, compact: true,
		layout: LayoutFlatInline, data: []byte("hello world\n"),
		xattrs: []Xattr{{"user.foo", []byte("bar")}, {"user.shared", []byte("same")}}},
	{path: "multi.bin", mode: S_IFREG | 0o644, size: 5000, nlink: 1, compact: true, layout: LayoutFlatInline,
		data:   pattern(5000),
		xattrs: []Xattr{{"system.posix_acl_access", aclAccess}, {"user.shared", []byte("same")}}},
	{path: "block.bin", mode: S_IFREG | 0o644, size: 4096, nlink: 1, compact: true, layout: LayoutFlatPlain,
		data:   pattern(4096),
		xattrs: []Xattr{{"security.test", []byte("label")}, {"user.shared", []byte("same")}}},
	{path: "empty", mode: S_IFREG | 0o644, nlink: 1, compact: true, layout: LayoutFlatPlain, data: []byte{}},
	{path: "inline.txt", mode: S_IFREG | 0o644, size: 7, nlink: 1, compact: true, layout: LayoutFlatInline, data: []byte("inline\n")},
	{path: "sub", mode: S_IFDIR | 0o2755, nlink: 3, compact: true, layout: LayoutFlatInline},
	{path: "sub/bigid", mode: S_IFREG | 0o4755, uid: 100000, gid: 200000, size: 6, nlink: 1, layout: LayoutFlatInline,
		data: []byte("owned\n")},
	{path: "sub/deeper", mode: S_IFDIR | 0o755, nlink: 2, compact: true, layout: LayoutFlatInline},
	{path: "sub/deeper/file", mode: S_IFREG | 0o644, size: 5, nlink: 1, compact: true, layout: LayoutFlatInline, data: []byte("deep\n")},
	{path: "sticky", mode: S_IFDIR | 0o1777, nlink: 2, compact: true, layout: LayoutFlatInline},
	{path: "opaque", mode: S_IFDIR | 0o755, nlink: 2, compact: true, layout: LayoutFlatInline,
		xattrs: []Xattr{{"trusted.overlay.opaque", []byte("y")}}},
	{path: "many", mode: S_IFDIR | 0o755, size: 4832, nlink: 2, compact: true, layout: LayoutFlatInline},
	{path: "many/f123", mode: S_IFREG | 0o644, nlink: 300, compact: true, layout: LayoutFlatPlain, data: []byte{}},
	{path: "link", mode: S_IFLNK | 0o777, size: 9, nlink: 1, compact: true, layout: LayoutFlatInline, target: "hello.txt"},
	{path: "longlink", mode: S_IFLNK | 0o777, size: 3000, nlink: 1, compact: true, layout: LayoutFlatInline, target: longTarget},
	{path: "dirlink", mode: S_IFLNK | 0o777, size: 10, nlink: 1, compact: true, layout: LayoutFlatInline, target: "sub/deeper"},
	{path: "fifo", mode: S_IFIFO | 0o644, nlink: 1, compact: true, layout: LayoutFlatPlain},
	{path: "null", mode: S_IFCHR | 0o644, nlink: 1, compact: true, layout: LayoutFlatPlain, major: 1, minor: 3},
	{path: "sda1", mode: S_IFBLK | 0o644, nlink: 1, compact: true, layout: LayoutFlatPlain, major: 8, minor: 17},
	{path: "whiteout", mode: S_IFCHR | 0o644, nlink: 1, compact: true, layout: LayoutFlatPlain},
}

func TestReaderPlain(t *testing.T) {
	img := openFixture(t, "plain.img")
	mtime := time.Unix(fixtureTime, 0)
	for _, w := range plainWant {
		ino, err := img.Lstat(w.path)
		if err != nil {
			t.Errorf("Lstat(%q): %v", w.path, err)
			continue
		}
		if ino.Mode != w.mode || ino.Uid != w.uid || ino.Gid != w.gid || ino.Nlink != w.nlink ||
			ino.Compact != w.compact || ino.Layout != w.layout || !ino.Mtime.Equal(mtime) ||
			ino.Devmajor != w.major || ino.Devminor != w.minor {
			t.Errorf("%s: mode %#o uid %d gid %d nlink %d compact %v layout %d mtime %v rdev %d:%d", w.path,
				ino.Mode, ino.Uid, ino.Gid, ino.Nlink, ino.Compact, ino.Layout, ino.Mtime, ino.Devmajor, ino.Devminor)
		}
		if w.size != 0 || !ino.IsDir() {
			if ino.Size != w.size {
				t.Errorf("%s: size %d, want %d", w.path, ino.Size, w.size)
			}
		}
		if w.data != nil {
			got, err := img.ReadFile(w.path)
			if err != nil || !bytes.Equal(got, w.data) {
				t.Errorf("%s: ReadFile = %d bytes, %v", w.path, len(got), err)
			}
		}
		if w.target != "" {
			got, err := img.Readlink(w.path)
			if err != nil || got != w.target {
				t.Errorf("%s: Readlink = %q, %v", w.path, got, err)
			}
		}
		xs, err := img.Xattrs(w.path)
		if err != nil {
			t.Errorf("%s: Xattrs: %v", w.path, err)
		} else if !slices.EqualFunc(xs, w.xattrs, func(a, b Xattr) bool {
			return a.Name == b.Name && bytes.Equal(a.Value, b.Value)
		}) {
			t.Errorf("%s: Xattrs = %q, want %q", w.path, xs, w.xattrs)
		}
	}

	// Hard links share one inode.
	a, _ := img.Lstat("hello.txt")
	b, _ := img.Lstat("hardlink")
	if a.Nid != b.Nid {
		t.Errorf("hard links: nids %d and %d", a.Nid, b.Nid)
	}
	// One of the xattrs is shared (-x1), the others inline.
	if a.XattrSize == 0 {
		t.Errorf("hello.txt: no inline xattr area")
	}

	// The multi-block directory.
	ents, err := img.ReadDir("many")
	if err != nil || len(ents) != 300 {
		t.Fatalf("ReadDir(many) = %d entries, %v", len(ents), err)
	}
	for i, e := range ents {
		if want := fmt.Sprintf("f%03d", i); e.Name() != want || e.Type() != 0 {
			t.Fatalf("many[%d] = %s", i, e)
		}
	}
	many, _ := img.Lstat("many")
	raw, err := img.ReadDirInode(many)
	if err != nil || len(raw) != 302 || raw[0].Name != "." || raw[1].Name != ".." ||
		raw[0].Nid != many.Nid || raw[1].Nid != img.Root().Nid || raw[0].FileType != FTDir {
		t.Errorf("ReadDirInode(many) = %d entries %v, %v", len(raw), raw[:min(2, len(raw))], err)
	}
	for _, name := range []string{"f000", "f150", "f299", "f255", "f256"} {
		if _, err := img.Lstat("many/" + name); err != nil {
			t.Errorf("Lstat(many/%s): %v", name, err)
		}
	}
	for _, name := range []string{"f300", "e", "g", "f15", "f1500", ""} {
		if _, err := img.Lstat("many/" + name); !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Lstat(many/%s) = %v, want not exist", name, err)
		}
	}

	// Root listing: sorted, without "." and "..", with the right types.
	ents, err = img.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name()+":"+e.Type().String())
	}
	want := "block.bin:---------- dirlink:L--------- empty:---------- fifo:p--------- hardlink:---------- " +
		"hello.txt:---------- inline.txt:---------- link:L--------- longlink:L--------- many:d--------- " +
		"multi.bin:---------- null:Dc--------- opaque:d--------- sda1:D--------- sticky:d--------- " +
		"sub:d--------- whiteout:Dc---------"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("ReadDir(.) =\n%s\nwant\n%s", got, want)
	}
}

func TestReaderFileInfo(t *testing.T) {
	img := openFixture(t, "plain.img")
	for _, c := range []struct {
		path string
		mode fs.FileMode
	}{
		{".", fs.ModeDir | 0o755},
		{"sub", fs.ModeDir | fs.ModeSetgid | 0o755},
		{"sticky", fs.ModeDir | fs.ModeSticky | 0o777},
		{"sub/bigid", fs.ModeSetuid | 0o755},
		{"null", fs.ModeDevice | fs.ModeCharDevice | 0o644},
		{"sda1", fs.ModeDevice | 0o644},
		{"fifo", fs.ModeNamedPipe | 0o644},
		{"link", fs.ModeSymlink | 0o777},
	} {
		ino, err := img.Lstat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		fi := ino.FileInfo()
		if fi.Mode() != c.mode || fi.Name() != baseName(c.path) || fi.Sys().(*Inode).Nid != ino.Nid ||
			fi.IsDir() != c.mode.IsDir() || !fi.ModTime().Equal(time.Unix(fixtureTime, 0)) {
			t.Errorf("%s: FileInfo = %v %q", c.path, fi.Mode(), fi.Name())
		}
	}

	// Stat and Open follow links; Lstat does not.
	for link, target := range map[string]string{"link": "hello.txt", "longlink": "inline.txt", "dirlink": "sub/deeper"} {
		fi, err := img.Stat(link)
		if err != nil {
			t.Fatalf("Stat(%s): %v", link, err)
		}
		ti, _ := img.Lstat(target)
		if fi.Sys().(*Inode).Nid != ti.Nid || fi.Name() != link {
			t.Errorf("Stat(%s) = nid %d %q, want nid %d", link, fi.Sys().(*Inode).Nid, fi.Name(), ti.Nid)
		}
	}
	if b, err := img.ReadFile("dirlink/file"); err != nil || string(b) != "deep\n" {
		t.Errorf("ReadFile through a linked directory = %q, %v", b, err)
	}
	if _, err := img.Readlink("hello.txt"); err == nil {
		t.Errorf("Readlink of a regular file succeeded")
	}
	if _, err := img.ReadFile("sub"); err == nil {
		t.Errorf("ReadFile of a directory succeeded")
	}
	if _, err := img.ReadDir("hello.txt"); err == nil {
		t.Errorf("ReadDir of a file succeeded")
	}
	if _, err := img.Lstat("hello.txt/x"); err == nil {
		t.Errorf("Lstat below a file succeeded")
	}
	for _, bad := range []string{"/hello.txt", "sub/", "./sub", "sub/../sub", ""} {
		if _, err := img.Stat(bad); !errors.Is(err, fs.ErrInvalid) {
			t.Errorf("Stat(%q) = %v, want ErrInvalid", bad, err)
		}
	}
}

func TestReaderFS(t *testing.T) {
	img := openFixture(t, "plain.img")
	if err := fstest.TestFS(img, "hello.txt", "multi.bin", "sub/deeper/file", "many/f299", "null", "link"); err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(img.LinkFS(), "hello.txt", "longlink", "dirlink", "sda1"); err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(openFixture(t, "chunk.img"), "data.bin", "sparse.bin", "small.txt"); err != nil {
		t.Fatal(err)
	}
	// os.CopyFS copies the tree, symlinks included, through LinkFS.
	dir := t.TempDir()
	sub, err := fs.Sub(img.LinkFS(), "sub")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(dir, sub); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "deeper", "file")); err != nil || string(b) != "deep\n" {
		t.Errorf("CopyFS result: %q, %v", b, err)
	}
	if target, err := fs.ReadLink(img.LinkFS(), "link"); err != nil || target != "hello.txt" {
		t.Errorf("fs.ReadLink = %q, %v", target, err)
	}
}

func TestReaderFile(t *testing.T) {
	img := openFixture(t, "plain.img")
	f, err := img.Open("multi.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ra := f.(io.ReaderAt)
	want := pattern(5000)
	// Reads that straddle the block and inline parts, and the end.
	for _, c := range []struct{ off, n int }{{0, 5000}, {4000, 200}, {4095, 2}, {4096, 904}, {4990, 20}, {5000, 1}} {
		p := make([]byte, c.n)
		n, err := ra.ReadAt(p, int64(c.off))
		wantN := max(0, min(c.n, 5000-c.off))
		if n != wantN || !bytes.Equal(p[:n], want[c.off:c.off+n]) || (wantN < c.n) != (err == io.EOF) {
			t.Errorf("ReadAt(%d, %d) = %d, %v", c.off, c.n, n, err)
		}
	}
	ino, _ := img.Lstat("many")
	dr, err := img.DataReader(ino)
	if err != nil || dr.Size() != 4832 {
		t.Fatalf("DataReader(many) = %v", err)
	}
	if _, err := io.Copy(io.Discard, dr); err != nil {
		t.Errorf("reading directory data: %v", err)
	}
}

func TestReaderChunk(t *testing.T) {
	raw := readFixture(t, "chunk.img")
	img := openBytes(t, raw)
	check := func(img *Image, name string, want []byte) {
		t.Helper()
		ino, err := img.Lstat(name)
		if err != nil {
			t.Fatal(err)
		}
		if ino.Layout != LayoutChunkBased || ino.ChunkFormat() != 0 {
			t.Errorf("%s: layout %d chunk format %#x", name, ino.Layout, ino.ChunkFormat())
		}
		got, err := img.ReadFile(name)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: ReadFile = %d bytes, %v", name, len(got), err)
		}
	}
	sparse := make([]byte, 20480)
	copy(sparse[8192:], pattern(4096))
	check(img, "data.bin", pattern(10000))
	check(img, "sparse.bin", sparse)
	check(img, "small.txt", []byte("small\n"))

	// mkfs.erofs 1.5 points zero chunks at a zero block; turn them into
	// holes (0xFFFFFFFF) as newer versions write them.
	ino, _ := img.Lstat("sparse.bin")
	table := (ino.tailOff() + 3) &^ 3
	holed := bytes.Clone(raw)
	for _, i := range []int64{0, 1, 3, 4} {
		le.PutUint32(holed[table+4*i:], NullAddr)
	}
	check(openBytes(t, holed), "sparse.bin", sparse)
}

func TestReaderDevices(t *testing.T) {
	meta := readFixture(t, "blob.img")
	blob := readFixture(t, "blob.dev")

	img := openBytes(t, meta)
	if _, err := img.ReadFile("data.bin"); err == nil || !strings.Contains(err.Error(), "needs extra device") {
		t.Errorf("ReadFile without the blob = %v", err)
	}
	if b, err := img.ReadFile("."); err == nil {
		t.Errorf("ReadFile(.) = %d bytes", len(b))
	}
	if d := img.Devices(); len(d) != 1 {
		t.Errorf("Devices() = %+v", d)
	}

	img = openBytes(t, meta, WithDevice(bytes.NewReader(blob), int64(len(blob))))
	ino, _ := img.Lstat("data.bin")
	if ino.ChunkFormat() != ChunkFormatIndexes {
		t.Errorf("data.bin chunk format %#x", ino.ChunkFormat())
	}
	for name, want := range map[string][]byte{"data.bin": pattern(10000), "small.txt": []byte("small\n")} {
		if got, err := img.ReadFile(name); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: ReadFile = %d bytes, %v", name, len(got), err)
		}
	}
	if err := fstest.TestFS(img, "data.bin", "sparse.bin"); err != nil {
		t.Error(err)
	}

	// Flat mode: the blob concatenated after the 1-block image, with the
	// slot's uniaddr saying so (mkfs.erofs 1.5 leaves it 0).
	combined := append(bytes.Clone(meta), blob...)
	le.PutUint32(combined[int(img.Super().DevtSlotOff)*deviceSlotSize+68:], uint32(len(meta)/4096))
	flat := openBytes(t, combined, WithFlatDevices())
	if got, err := flat.ReadFile("data.bin"); err != nil || !bytes.Equal(got, pattern(10000)) {
		t.Errorf("flat: ReadFile = %d bytes, %v", len(got), err)
	}

	if _, err := Open(bytes.NewReader(meta), int64(len(meta)), WithDevice(bytes.NewReader(blob), 1), WithDevice(bytes.NewReader(blob), 1)); err == nil {
		t.Errorf("Open with two devices for one slot succeeded")
	}
}

// direntAt returns the byte offset of the dirent for name in a directory
// whose data is one inline block.
func direntAt(t *testing.T, img *Image, dir, name string) int64 {
	t.Helper()
	ino, err := img.Lstat(dir)
	if err != nil || ino.Layout != LayoutFlatInline || ino.Size > int64(img.bs) {
		t.Fatalf("%s: not a one-block inline directory (%v)", dir, err)
	}
	ents, err := img.ReadDirInode(ino)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range ents {
		if e.Name == name {
			return ino.tailOff() + int64(i)*DirentSize
		}
	}
	t.Fatalf("%s/%s not found", dir, name)
	return 0
}

func TestReaderCorrupt(t *testing.T) {
	raw := readFixture(t, "plain.img")
	img := openBytes(t, raw)
	root := img.Root()

	patch := func(f func(b []byte)) *Image {
		b := bytes.Clone(raw)
		f(b)
		img, err := Open(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatalf("Open after patch: %v", err)
		}
		return img
	}
	wantErr := func(what string, err error, sub string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), sub) {
			t.Errorf("%s: error %v, want one containing %q", what, err, sub)
		}
	}

	for _, c := range []struct {
		name string
		f    func([]byte)
		sub  string
	}{
		{"magic", func(b []byte) { b[SuperOffset] = 0 }, "not an EROFS image"},
		{"blkszbits", func(b []byte) { b[SuperOffset+0x0C] = 30 }, "block size"},
		{"dirblkbits", func(b []byte) { b[SuperOffset+0x5A] = 1 }, "dirblkbits"},
		{"incompat", func(b []byte) { b[SuperOffset+0x53] = 0x80 }, "incompatible"},
		{"root not a dir", func(b []byte) { le.PutUint16(b[root.iloc+4:], S_IFREG|0o644) }, "not a directory"},
		{"root nid", func(b []byte) { le.PutUint16(b[SuperOffset+0x0E:], 0xFFFF) }, "beyond the image"},
		{"i_format", func(b []byte) { le.PutUint16(b[root.iloc:], 0x0104) }, "i_format"},
		{"layout", func(b []byte) { le.PutUint16(b[root.iloc:], 7<<1) }, "layout"},
	} {
		b := bytes.Clone(raw)
		c.f(b)
		_, err := Open(bytes.NewReader(b), int64(len(b)))
		wantErr(c.name, err, c.sub)
	}
	_, err := Open(bytes.NewReader(raw[:1100]), 1100)
	wantErr("short image", err, "too small")

	// A directory entry that points at an ancestor.
	deeper := direntAt(t, img, "sub", "deeper")
	cyc := patch(func(b []byte) { le.PutUint64(b[deeper:], root.Nid) })
	_, err = cyc.Lstat("sub/deeper/sub")
	wantErr("cycle", err, "ancestor")

	// A symlink that resolves to itself: "hello.txt" → "./../link".
	link, _ := img.Lstat("link")
	loop := patch(func(b []byte) { copy(b[link.tailOff():], "./../link") })
	_, err = loop.Stat("link")
	wantErr("link loop", err, "too many levels")
	if t2, err := loop.Readlink("link"); err != nil || t2 != "./../link" {
		t.Errorf("Readlink of the loop = %q, %v", t2, err)
	}
	// ".." inside a target: "sub/deeper" → "sub/../sub".
	dirlink, _ := img.Lstat("dirlink")
	dotdot := patch(func(b []byte) { copy(b[dirlink.tailOff():], "sub/../sub") })
	if fi, err := dotdot.Stat("dirlink/bigid"); err != nil || fi.Size() != 6 {
		t.Errorf("Stat through sub/../sub: %v", err)
	}

	// Directory block checks.
	for _, c := range []struct {
		name string
		off  int64
		val  uint16
		sub  string
	}{
		{"nameoff0 zero", 8, 0, "first nameoff"},
		{"nameoff0 odd", 8, 13, "first nameoff"},
		{"nameoff0 past end", 8, 600, "first nameoff"},
		{"nameoff before names", 12 + 8, 4, "name bounds"},
		{"names overlap", 2*12 + 8, 58, "name bounds"},
	} {
		dir, _ := img.Lstat("sub")
		bad := patch(func(b []byte) { le.PutUint16(b[dir.tailOff()+c.off:], c.val) })
		_, err := bad.ReadDir("sub")
		wantErr(c.name, err, c.sub)
	}
	slash := patch(func(b []byte) {
		off := direntAt(t, img, "sub", "bigid")
		b[dirTailOff(img, "sub")+int64(le.Uint16(b[off+8:]))] = '/'
	})
	_, err = slash.ReadDir("sub")
	wantErr("slash in name", err, "holds '/'")

	// Inline data that would cross into the next block.
	hello, _ := img.Lstat("hello.txt")
	big := patch(func(b []byte) { le.PutUint32(b[hello.iloc+8:], 4000) })
	_, err = big.ReadFile("hello.txt")
	wantErr("inline across blocks", err, "crosses a block")

	// FLAT_PLAIN blocks beyond the image end, and a huge extended size.
	blk, _ := img.Lstat("block.bin")
	far := patch(func(b []byte) { le.PutUint32(b[blk.iloc+0x10:], 1000) })
	_, err = far.ReadFile("block.bin")
	wantErr("blocks past the end", err, "beyond the end")
	bigid, _ := img.Lstat("sub/bigid")
	neg := patch(func(b []byte) { le.PutUint64(b[bigid.iloc+8:], 1<<63) })
	_, err = neg.Lstat("sub/bigid")
	wantErr("negative size", err, "negative")
	huge := patch(func(b []byte) { le.PutUint32(b[hello.iloc+8:], 0xFFFFFFF0) })
	_, err = huge.ReadFile("hello.txt")
	wantErr("huge size: ReadFile", err, "too large")
	_, err = huge.Open("hello.txt")
	wantErr("huge size: Open", err, "nid")

	// Xattr area overruns.
	multi, _ := img.Lstat("multi.bin")
	sh := patch(func(b []byte) { b[multi.iloc+CompactInodeSize+4] = 200 })
	_, err = sh.Xattrs("multi.bin")
	wantErr("shared count", err, "overflow")
	ov := patch(func(b []byte) {
		le.PutUint16(b[multi.iloc+CompactInodeSize+xattrIbodyHeaderSize+4+2:], 0xFFFF)
	})
	_, err = ov.Xattrs("multi.bin")
	wantErr("inline entry", err, "overruns")
}

// dirTailOff is where a one-block inline directory's data starts.
func dirTailOff(img *Image, dir string) int64 {
	ino, _ := img.Lstat(dir)
	return ino.tailOff()
}

func TestReaderLongPrefix(t *testing.T) {
	// mkfs.erofs 1.5 cannot write long prefixes: graft a table onto
	// plain.img and point opaque's inline entry at it.
	raw := bytes.Clone(readFixture(t, "plain.img"))
	img := openBytes(t, raw)
	opq, _ := img.Lstat("opaque")
	entry := opq.iloc + CompactInodeSize + xattrIbodyHeaderSize // no shared ids
	if raw[entry+1] != XattrIndexTrusted || string(raw[entry+4:entry+4+14]) != "overlay.opaque" {
		t.Fatalf("unexpected xattr entry % x", raw[entry:entry+20])
	}
	// The table goes in the unused tail of the last block: "trusted." +
	// "overlay." as prefix 0.
	tab := int64(len(raw) - 64)
	rec := append([]byte{9, 0, XattrIndexTrusted}, "overlay."...)
	copy(raw[tab:], rec)
	le.PutUint32(raw[SuperOffset+0x50:], FeatureIncompatXattrPrefixes)
	raw[SuperOffset+0x5B] = 1
	le.PutUint32(raw[SuperOffset+0x5C:], uint32(tab/4))
	// Entry: suffix "opaque" with long prefix 0, value "y" — shorter than
	// the original, so the rest of the slot becomes zero (ignored) entries.
	e := append([]byte{6, 0x80, 1, 0}, "opaquey"...)
	clear(raw[entry : entry+20])
	copy(raw[entry:], e)

	img = openBytes(t, raw)
	xs, err := img.Xattrs("opaque")
	if err != nil || len(xs) != 1 || xs[0].Name != "trusted.overlay.opaque" || string(xs[0].Value) != "y" {
		t.Fatalf("Xattrs = %q, %v", xs, err)
	}
	// The same entry with a prefix index past the table is an error.
	raw[entry+1] = 0x85
	if _, err := openBytes(t, raw).Xattrs("opaque"); err == nil {
		t.Errorf("long prefix 5 of 1: no error")
	}
	raw[entry+1] = 0x80
	// A record's length counts the base index and the infix: 1 to 256
	// (an infix of at most 255 bytes), as the kernel requires; 0 would be
	// read as 65536, and names of 64 KiB made from it cost 2 GB for an
	// image of 336 KB.
	for _, n := range []uint16{0, 257, 4096} {
		le.PutUint16(raw[tab:], n)
		if _, err := openBytes(t, raw).Xattrs("opaque"); err == nil || !strings.Contains(err.Error(), "long xattr prefix 0: record of") {
			t.Errorf("prefix record of length %d: %v", n, err)
		}
	}
}

// TestWalk: Walk visits what fs.WalkDir visits, in the same order, by
// inode; it does not descend into a symbolic link whose directory entry
// says "directory"; and it refuses a directory reached twice, which
// fs.WalkDir would walk again under every name.
func TestWalk(t *testing.T) {
	raw := readFixture(t, "plain.img")
	img := openBytes(t, raw)
	var want []string
	if err := fs.WalkDir(img, ".", func(p string, d fs.DirEntry, err error) error {
		want = append(want, p)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	walk := func(img *Image, skip string) ([]string, error) {
		var got []string
		err := img.Walk(".", func(p string, ino *Inode) error {
			got = append(got, p)
			if l, err := img.Lstat(p); err != nil || l.Nid != ino.Nid {
				t.Errorf("%s: nid %d, Lstat says %v %v", p, ino.Nid, l, err)
			}
			if p == skip {
				return fs.SkipDir
			}
			return nil
		})
		return got, err
	}
	got, err := walk(img, "")
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Walk: %v\n got %q\nwant %q", err, got, want)
	}
	n := 0
	if err := img.Walk(".", func(string, *Inode) error {
		if n++; n == 3 {
			return fs.SkipAll
		}
		return nil
	}); err != nil || n != 3 {
		t.Errorf("SkipAll: %v after %d calls", err, n)
	}
	// SkipDir from a file skips the rest of its directory, as with
	// fs.WalkDir.
	var fromFile, wantFile []string
	img.Walk(".", func(p string, ino *Inode) error {
		fromFile = append(fromFile, p)
		if p == "sub/bigid" {
			return fs.SkipDir
		}
		return nil
	})
	fs.WalkDir(img, ".", func(p string, d fs.DirEntry, err error) error {
		wantFile = append(wantFile, p)
		if p == "sub/bigid" {
			return fs.SkipDir
		}
		return nil
	})
	if !slices.Equal(fromFile, wantFile) || slices.Contains(fromFile, "sub/deeper") {
		t.Errorf("SkipDir from a file:\n got %q\nwant %q", fromFile, wantFile)
	}
	got, _ = walk(img, "sub")
	if slices.Contains(got, "sub/deeper") || !slices.Contains(got, "sub") || len(got) != len(want)-3 {
		t.Errorf("SkipDir of sub: %q", got)
	}

	// "dirlink" (a symbolic link to sub/deeper) listed as a directory.
	off := direntAt(t, img, ".", "dirlink")
	lie := bytes.Clone(raw)
	lie[off+10] = 2 // EROFS_FT_DIR
	limg := openBytes(t, lie)
	var wd []string
	fs.WalkDir(limg, ".", func(p string, d fs.DirEntry, err error) error {
		wd = append(wd, p)
		return nil
	})
	if !slices.Contains(wd, "dirlink/file") {
		t.Fatalf("fs.WalkDir did not follow the lie (%q): the test proves nothing", wd)
	}
	if got, err := walk(limg, ""); err != nil || !slices.Equal(got, want) {
		t.Errorf("Walk with dirlink typed as a directory: %v\n got %q\nwant %q", err, got, want)
	}

	// "opaque" pointing at sub: one directory, two parents.
	sub, _ := img.Lstat("sub")
	dag := bytes.Clone(raw)
	le.PutUint64(dag[direntAt(t, img, ".", "opaque"):], sub.Nid)
	if _, err := walk(openBytes(t, dag), ""); err == nil || !strings.Contains(err.Error(), "one parent") {
		t.Errorf("Walk of a directory listed twice: %v", err)
	}
}

// TestNextDataHoles: holes.img (4 KiB, made by hand: no builder writes
// these) holds two files of 1 PiB that are all hole, a FLAT_PLAIN file
// whose start block is the null address (Linux 6.15+) and a CHUNK_BASED
// one whose every chunk is. NextData finds no data in either, so that
// extract skips them unread; what is read of them is zeros.
func TestNextDataHoles(t *testing.T) {
	img := openBytes(t, readFixture(t, "holes.img"))
	for _, name := range []string{"hole", "chunks"} {
		ino, err := img.Lstat(name)
		if err != nil {
			t.Fatal(err)
		}
		if ino.Size != 1<<50 {
			t.Fatalf("%s: %d bytes", name, ino.Size)
		}
		for _, off := range []int64{0, 12345, 1 << 49} {
			if next, err := img.NextData(ino, off); err != nil || next != ino.Size {
				t.Errorf("%s: NextData(%d) = %d, %v; want the size", name, off, next, err)
			}
		}
		r, err := img.DataReader(ino)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 8192)
		if _, err := r.ReadAt(b, 1<<40+7); err != nil || !isZero(b) {
			t.Errorf("%s: ReadAt: %v (zeros: %v)", name, err, isZero(b))
		}
	}
	// Stored data is data, zeros or not.
	plain := openBytes(t, readFixture(t, "plain.img"))
	ino, _ := plain.Lstat("block.bin")
	if next, err := plain.NextData(ino, 100); err != nil || next != 100 {
		t.Errorf("block.bin: NextData(100) = %d, %v", next, err)
	}
}

// TestCorruptBlockCountAlloc: fragcount.img is a fragments image (lz4,
// 7 blocks) whose packed inode's first pcluster claims 255 blocks instead
// of 3 (one byte changed, by review15-d's mutation sweep). Every file's
// fragment is in that extent: reading them must fail without allocating
// the claimed MiB each time (321 MB for the tree before the range was
// checked first).
func TestCorruptBlockCountAlloc(t *testing.T) {
	img := openBytes(t, readFixture(t, "fragcount.img"))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	files, failed := 0, 0
	err := img.Walk(".", func(p string, ino *Inode) error {
		if ino.IsRegular() {
			files++
			if _, err := img.ReadFile(p); err != nil {
				failed++
			}
		}
		return nil
	})
	runtime.ReadMemStats(&after)
	if err != nil || files < 50 || failed == 0 {
		t.Fatalf("walk: %v; %d files, %d failed: the fixture is not what the test needs", err, files, failed)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("reading %d files (%d failed) allocated %d MiB", files, failed, alloc>>20)
	}
}

// TestNamesNotUTF8: names are bytes; the reader takes any but "", ".",
// ".." and "/" inside them, as Linux does (fs.ValidPath wants UTF-8).
func TestNamesNotUTF8(t *testing.T) {
	name := "d\xff/f\xfe"
	raw := buildFiles(t, Options{}, map[string][]byte{name: []byte("hello\n")})
	img, err := Open(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := img.ReadFile(name); err != nil || string(b) != "hello\n" {
		t.Errorf("ReadFile(%q) = %q, %v", name, b, err)
	}
	if es, err := img.ReadDir("d\xff"); err != nil || len(es) != 1 || es[0].Name() != "f\xfe" {
		t.Errorf("ReadDir: %v, %v", es, err)
	}
	var walked []string
	if err := img.Walk(".", func(p string, _ *Inode) error { walked = append(walked, p); return nil }); err != nil || len(walked) != 3 {
		t.Errorf("Walk: %q, %v", walked, err)
	}
	for _, bad := range []string{"", "/d", "d/", "d//f", "./d", "d/..", "..", "d/./f"} {
		if ValidPath(bad) {
			t.Errorf("ValidPath(%q) = true", bad)
		}
	}
}

// TestCheckXattrName: the namespaces EROFS names, and Linux's limit of
// 255 bytes on the whole name (a longer one is listed but not readable).
func TestCheckXattrName(t *testing.T) {
	for name, ok := range map[string]bool{
		"user.a": true, "trusted.overlay.opaque": true, "security.capability": true,
		"system.posix_acl_access": true, "system.other": false, "foo.bar": false, "user.": false,
		"user." + strings.Repeat("n", 250): true, "user." + strings.Repeat("n", 251): false,
	} {
		if err := CheckXattrName(name); (err == nil) != ok {
			t.Errorf("CheckXattrName(%.20q… %d bytes) = %v, want ok %v", name, len(name), err, ok)
		}
	}
}
