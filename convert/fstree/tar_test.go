//go:build linux

package fstree

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

// tarEntry is one entry for mkTar.
type tarEntry struct {
	hdr  tar.Header
	data string
}

func mkTar(t *testing.T, ents ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := tar.NewWriter(&buf)
	for _, e := range ents {
		h := e.hdr
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.ModTime.IsZero() {
			h.ModTime = t0
		}
		h.Format = tar.FormatPAX
		check(t, w.WriteHeader(&h))
		_, err := w.Write([]byte(e.data))
		check(t, err)
	}
	check(t, w.Close())
	return buf.Bytes()
}

func reg(name, data string) tarEntry { return tarEntry{tar.Header{Name: name}, data} }

func dirEnt(name string, mode int64) tarEntry {
	return tarEntry{tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode}, ""}
}

func TestFromTarWhiteouts(t *testing.T) {
	implied := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	tm := time.Date(2022, 2, 2, 2, 2, 2, 123456789, time.UTC)
	whTime := time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)
	raw := mkTar(t,
		dirEnt("./", 0o700),
		reg("/abs/file", "x"),
		reg("./dot/./x//y", "y"),
		tarEntry{tar.Header{Name: "a/.wh.foo", Mode: 0o640, Uid: 5, Gid: 6, ModTime: whTime}, ""},
		reg("b/foo", "gone"),
		reg("b/.wh.foo", ""),
		reg("c/sub/x", "gone"),
		reg("c/.wh.sub", ""),
		reg("c/keep", "k"),
		reg("o/.wh..wh..opq", ""),
		dirEnt("o/", 0o711),
		reg("o/.wh..wh.plnk", ""),
		reg("dup", "one"),
		reg("dup", "two"),
		dirEnt("dd/", 0o700),
		reg("dd/k", "k"),
		tarEntry{tar.Header{Name: "dd", Typeflag: tar.TypeDir, Mode: 0o751,
			PAXRecords: map[string]string{"SCHILY.xattr.user.z": "z"}}, ""},
		dirEnt("td/", 0o755),
		reg("td/k", "k"),
		tarEntry{tar.Header{Name: "td", Typeflag: tar.TypeSymlink, Linkname: "dup", Mode: 0o777}, ""},
		tarEntry{tar.Header{Name: "hl", Typeflag: tar.TypeLink, Linkname: "./dup"}, ""},
		tarEntry{tar.Header{Name: "x", Mode: 0o4711, Uid: 1 << 20, Gid: 3, ModTime: tm, PAXRecords: map[string]string{
			"SCHILY.xattr.user.a":              "v",
			"SCHILY.xattr.security.capability": capV2(),
			"LIBARCHIVE.xattr.user.b":          base64.RawStdEncoding.EncodeToString([]byte("bee")),
			"LIBARCHIVE.xattr.user.sp%20ce":    base64.StdEncoding.EncodeToString([]byte("s")),
		}}, "xx"},
		tarEntry{tar.Header{Name: "chr", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, Mode: 0o666}, ""},
		tarEntry{tar.Header{Name: "blk", Typeflag: tar.TypeBlock, Devmajor: 8, Devminor: 17}, ""},
		tarEntry{tar.Header{Name: "fifo", Typeflag: tar.TypeFifo}, ""},
		reg("imp/x", ""),
		dirEnt("imp", 0o755),
		reg("lw/.wh.z", ""),
		reg("lw/z", "back"), // a later entry replaces the whiteout
	)

	tr, err := FromTar(bytes.NewReader(raw), TarOptions{ImpliedDirMtime: implied})
	check(t, err)
	paths := strings.Join(tr.Paths(), " ")
	wantPaths := ". a a/foo abs abs/file b b/foo blk c c/keep c/sub chr dd dd/k dot dot/x dot/x/y dup fifo hl imp imp/x lw lw/z o td x"
	if paths != wantPaths {
		t.Errorf("paths\n got %s\nwant %s", paths, wantPaths)
	}

	wh := func(p string) { // a whiteout made from a plain .wh. entry: no permission bits
		t.Helper()
		n := tr.Node(p)
		if n == nil || n.Mode != erofs.S_IFCHR || n.Devmajor != 0 || n.Devminor != 0 || len(n.Xattrs) != 0 {
			t.Errorf("%s: not a whiteout: %+v", p, n)
		}
	}
	wh("b/foo")
	wh("c/sub")
	if n := tr.Node("a/foo"); n == nil || n.Mode != erofs.S_IFCHR || n.Uid != 5 || n.Gid != 6 || !n.Mtime.Equal(whTime) {
		t.Errorf("a/foo: %+v", n)
	}
	impliedDir := func(p string, xattrs map[string]string) {
		t.Helper()
		n := tr.Node(p)
		if n == nil || !n.Implied || n.Mode != erofs.S_IFDIR|0o755 || n.Uid != 0 || n.Gid != 0 || !n.Mtime.Equal(implied) ||
			!reflect.DeepEqual(n.Xattrs, xattrs) {
			t.Errorf("%s: not an implied dir %v: %+v", p, xattrs, n)
		}
	}
	origin := map[string]string{whiteout.OriginXattr: ""}
	impliedDir("a", origin)
	impliedDir("b", origin)
	impliedDir("c", origin)
	impliedDir("abs", nil)
	impliedDir("dot", nil)
	impliedDir("dot/x", nil)
	impliedDir("lw", nil) // its whiteout was replaced: no origin
	if n := tr.Node("."); n.Implied || n.Mode != erofs.S_IFDIR|0o700 || len(n.Xattrs) != 0 {
		t.Errorf("root: %+v", n)
	}
	if n := tr.Node("o"); n.Implied || n.Mode != erofs.S_IFDIR|0o711 || !reflect.DeepEqual(n.Xattrs, map[string]string{whiteout.OpaqueXattr: "y"}) {
		t.Errorf("o: %+v", n)
	}
	if n := tr.Node("imp"); n.Implied {
		t.Errorf("imp still implied")
	}
	if n := tr.Node("dd"); n.Mode != erofs.S_IFDIR|0o751 || n.Xattrs["user.z"] != "z" {
		t.Errorf("dd: %+v", n)
	}
	if n := tr.Node("td"); n.Type() != erofs.S_IFLNK || n.Target != "dup" {
		t.Errorf("td: %+v", n)
	}
	if n := tr.Node("dup"); n.Size != 3 || n.Digest != sum("two") {
		t.Errorf("dup: %+v", n)
	}
	if n, d := tr.Node("hl"), tr.Node("dup"); n.Digest != d.Digest || n.Mode != d.Mode || n.Size != d.Size {
		t.Errorf("hl: %+v", n)
	}
	if g := tr.LinkGroups(); !reflect.DeepEqual(g, [][]string{{"dup", "hl"}}) {
		t.Errorf("LinkGroups = %v", g)
	}
	x := tr.Node("x")
	wantX := map[string]string{"user.a": "v", "security.capability": capV2(), "user.b": "bee", "user.sp ce": "s"}
	if x.Mode != erofs.S_IFREG|0o4711 || x.Uid != 1<<20 || x.Gid != 3 || !x.Mtime.Equal(tm) || !reflect.DeepEqual(x.Xattrs, wantX) {
		t.Errorf("x: %+v", x)
	}
	if n := tr.Node("chr"); n.Mode != erofs.S_IFCHR|0o666 || n.Devmajor != 1 || n.Devminor != 3 {
		t.Errorf("chr: %+v", n)
	}
	if n := tr.Node("blk"); n.Mode != erofs.S_IFBLK|0o644 || n.Devmajor != 8 || n.Devminor != 17 {
		t.Errorf("blk: %+v", n)
	}
	if n := tr.Node("fifo"); n.Mode != erofs.S_IFIFO|0o644 {
		t.Errorf("fifo: %+v", n)
	}

	// "keep" takes the names literally.
	kt, err := FromTar(bytes.NewReader(raw), TarOptions{Whiteouts: whiteout.Keep})
	check(t, err)
	for _, p := range []string{"a/.wh.foo", "o/.wh..wh..opq", "o/.wh..wh.plnk", "b/foo", "c/sub/x", "b/.wh.foo"} {
		if kt.Node(p) == nil {
			t.Errorf("keep: %s missing", p)
		}
	}
	if n := kt.Node("o"); len(n.Xattrs) != 0 {
		t.Errorf("keep: o has xattrs %v", n.Xattrs)
	}
}

// TestFromTarOrder checks that the whiteout xattrs do not depend on entry
// order: markers before and after their directory give the same tree.
func TestFromTarOrder(t *testing.T) {
	d := dirEnt("d/", 0o700)
	opq, wh := reg("d/.wh..wh..opq", ""), reg("d/.wh.x", "")
	a, err := FromTar(bytes.NewReader(mkTar(t, d, opq, wh)), TarOptions{})
	check(t, err)
	b, err := FromTar(bytes.NewReader(mkTar(t, wh, opq, d)), TarOptions{})
	check(t, err)
	if diff := Diff(a, b, DiffOptions{}); len(diff) != 0 {
		t.Errorf("order matters:\n%s", strings.Join(diff, "\n"))
	}
	want := map[string]string{whiteout.OpaqueXattr: "y", whiteout.OriginXattr: ""}
	if n := a.Node("d"); !reflect.DeepEqual(n.Xattrs, want) || n.Implied {
		t.Errorf("d: %+v", n)
	}
}

func TestFromTarErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		ents []tarEntry
		msg  string
	}{
		{"dotdot", []tarEntry{reg("../x", "")}, `"../x"`},
		{"inner dotdot", []tarEntry{reg("a/../../x", "")}, `"a/../../x"`},
		{"link to missing", []tarEntry{reg("a", ""),
			{tar.Header{Name: "l", Typeflag: tar.TypeLink, Linkname: "nothere"}, ""}}, `"l"`},
		{"link escapes", []tarEntry{{tar.Header{Name: "l", Typeflag: tar.TypeLink, Linkname: "../a"}, ""}}, `"l"`},
		{"link to dir", []tarEntry{dirEnt("d", 0o755),
			{tar.Header{Name: "l", Typeflag: tar.TypeLink, Linkname: "d"}, ""}}, `"l"`},
		{"parent not dir", []tarEntry{reg("f", ""), reg("f/g", "")}, `"f/g"`},
		{"root not dir", []tarEntry{reg(".", "")}, `"."`},
	} {
		_, err := FromTar(bytes.NewReader(mkTar(t, tc.ents...)), TarOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: err = %v, want one naming %s", tc.name, err, tc.msg)
		}
	}
	// A stream cut inside a file's data.
	raw := mkTar(t, reg("f", strings.Repeat("x", 2000)))
	if _, err := FromTar(bytes.NewReader(raw[:1200]), TarOptions{}); err == nil {
		t.Errorf("truncated tar accepted")
	}
}

// TestFromTarLinkReplaced: replacing a link's target makes a new inode, as
// extraction does; the other name keeps the old one.
func TestFromTarLinkReplaced(t *testing.T) {
	raw := mkTar(t,
		reg("a", "old"),
		tarEntry{tar.Header{Name: "b", Typeflag: tar.TypeLink, Linkname: "a"}, ""},
		tarEntry{tar.Header{Name: "c", Typeflag: tar.TypeLink, Linkname: "b"}, ""},
		reg("a", "new"),
	)
	tr, err := FromTar(bytes.NewReader(raw), TarOptions{})
	check(t, err)
	if g := tr.LinkGroups(); len(g) != 1 || strings.Join(g[0], " ") != "b c" {
		t.Errorf("LinkGroups = %v", g)
	}
	if tr.Node("a").Digest != sum("new") || tr.Node("b").Digest != sum("old") {
		t.Errorf("contents: a %x b %x", tr.Node("a").Digest, tr.Node("b").Digest)
	}
}

// TestFromTarLinkToWhiteout: a hard link to a whiteout is a char device
// 0:0 too, and a whiteout, as overlayfs makes them (links of one inode):
// its directory gets trusted.overlay.origin too (mkfs.erofs --aufs gives
// it none, and overlayfs lists the link where it does not merge).
func TestFromTarLinkToWhiteout(t *testing.T) {
	raw := mkTar(t,
		tarEntry{tar.Header{Name: "d1/", Typeflag: tar.TypeDir, Mode: 0o755}, ""},
		tarEntry{tar.Header{Name: "d2/", Typeflag: tar.TypeDir, Mode: 0o755}, ""},
		tarEntry{tar.Header{Name: "d1/.wh.x", Mode: 0o644}, ""},
		tarEntry{tar.Header{Name: "d2/y", Typeflag: tar.TypeLink, Linkname: "d1/x"}, ""},
	)
	tr, err := FromTar(bytes.NewReader(raw), TarOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if y := tr.Node("d2/y"); y == nil || y.Mode != erofs.S_IFCHR || y.Devmajor != 0 {
		t.Errorf("d2/y: %+v, want a whiteout device", y)
	}
	if _, ok := tr.Node("d1").Xattrs[whiteout.OriginXattr]; !ok {
		t.Error("d1, which holds the whiteout, has no trusted.overlay.origin")
	}
	if _, ok := tr.Node("d2").Xattrs[whiteout.OriginXattr]; !ok {
		t.Error("d2, which holds a link to it, has no trusted.overlay.origin")
	}
}

// TestFromTarXattrsLeftOut: xattrs EROFS cannot store are not expected.
func TestFromTarXattrsLeftOut(t *testing.T) {
	long := "user." + strings.Repeat("n", 251)
	raw := mkTar(t, tarEntry{tar.Header{Name: "f", PAXRecords: map[string]string{
		"SCHILY.xattr.foo.bar": "x", "SCHILY.xattr." + long: "y", "SCHILY.xattr.user.ok": "z"}}, "hi"})
	tr, err := FromTar(bytes.NewReader(raw), TarOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if x := tr.Node("f").Xattrs; len(x) != 1 || x["user.ok"] != "z" {
		t.Errorf("xattrs %v, want user.ok alone", x)
	}
}

// TestFromTarVolumeLabel: a GNU volume label names no file, as the
// converters take it; Stack too.
func TestFromTarVolumeLabel(t *testing.T) {
	raw := mkTar(t, tarEntry{tar.Header{Name: "VOL", Typeflag: 'V'}, ""}, reg("a", "a\n"))
	tr, err := FromTar(bytes.NewReader(raw), TarOptions{})
	check(t, err)
	if tr.Node("VOL") != nil || tr.Node("a") == nil {
		t.Errorf("paths %v, want . and a", tr.Paths())
	}
	s := NewStack(time.Time{})
	if _, ownErr, err := s.Layer(bytes.NewReader(raw)); err != nil || ownErr != nil {
		t.Errorf("Stack.Layer: %v, %v", err, ownErr)
	}
}
