package whiteout

import (
	"archive/tar"
	"maps"
	"testing"
)

// TestNames: what each OCI spelling does to a layer.
func TestNames(t *testing.T) {
	l := NewLayer(Overlay)
	for _, name := range []string{"a/.wh.b", ".wh.top", "c/.wh..wh..opq", "a/.wh..wh.plnk", "a/.whx"} {
		if err := l.Add(&tar.Header{Name: name, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
	}
	for p, want := range map[string]string{
		"a/b": "whiteout", "top": "whiteout", "c": "opaque", "a/.whx": "file",
		"a/.wh..wh.plnk": "", "a/.wh.b": "", "c/.wh..wh..opq": "",
	} {
		got := ""
		switch n := l.Node(p); {
		case n == nil:
		case n.Whiteout && n.Named():
			got = "whiteout"
		case n.IsDir() && n.Opaque:
			got = "opaque"
		case !n.IsDir():
			got = "file"
		}
		if got != want {
			t.Errorf("%s: %q, want %q", p, got, want)
		}
	}
	for _, name := range []string{"a/.wh.", "a/.wh.."} {
		if err := NewLayer(Overlay).Add(&tar.Header{Name: name, Typeflag: tar.TypeReg}); err == nil {
			t.Errorf("%s: want an error", name)
		}
	}
}

// TestKeep: with Keep, whiteouts and devices 0:0 are what the tar says.
func TestKeep(t *testing.T) {
	l := NewLayer(Keep)
	l.Add(&tar.Header{Name: "a/.wh.b", Typeflag: tar.TypeReg})
	l.Add(&tar.Header{Name: "c", Typeflag: tar.TypeChar})
	if n := l.Node("a/.wh.b"); n == nil || n.Whiteout || l.Node("a/b") != nil {
		t.Errorf("keep: a/.wh.b is %+v", n)
	}
	if n := l.Node("c"); n == nil || n.Whiteout {
		t.Errorf("keep: the device c is %+v", n)
	}
	if m, err := ParseMode("keep"); err != nil || m != Keep {
		t.Error("ParseMode(keep)")
	}
	if _, err := ParseMode("aufs"); err == nil {
		t.Error("ParseMode(aufs): want an error")
	}
	if Overlay.KeepXattr(OpaqueXattr) || !Keep.KeepXattr(OpaqueXattr) || !Overlay.KeepXattr("user.x") {
		t.Error("KeepXattr: overlayfs's xattrs are kept with Keep only")
	}
}

// TestDevice: a character device 0:0 is a whiteout kept as the tar has
// it, and a hard link to a whiteout is one of the same inode.
func TestDevice(t *testing.T) {
	l := NewLayer(Overlay)
	dev := &tar.Header{Name: "d/x", Typeflag: tar.TypeChar, Mode: 0o600}
	for _, h := range []*tar.Header{dev, {Name: "d/y", Typeflag: tar.TypeLink, Linkname: "d/x"}} {
		if err := l.Add(h); err != nil {
			t.Fatal(err)
		}
	}
	x, y := l.Node("d/x"), l.Node("d/y")
	if !x.Whiteout || x.Named() || x.Hdr != dev || !y.Whiteout || y.Hdr != dev {
		t.Errorf("d/x %+v, d/y %+v", x, y)
	}
}

// TestCovers: where a layer leaves nothing of a lower layer's file.
func TestCovers(t *testing.T) {
	l, err := layerOf(t, 2, "f:a d:b f:b/c w:e f:g/h s:s o:k f:m/n")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{
		"a": true, "a/x": true, // an entry at p, a file above p
		"b": true, "b/c": true, "b/d": false, // a directory replaces a file; merges
		"e": true, "e/f": true, // whiteouts
		"g": true, "g/x": false, "s/x": true,
		"k/x": true, "k": true, // an opaque marker hides the directory's files
		"m/x": false, "z": false,
	} {
		if got := l.Covers(p); got != want {
			t.Errorf("Covers(%q) = %v, want %v", p, got, want)
		}
	}
	root, err := layerOf(t, 2, "f:a o:.")
	if err != nil {
		t.Fatal(err)
	}
	if !root.RootOpaque() || !root.Covers("z") || !root.Covers("q/r") {
		t.Error("an opaque root covers everything below")
	}
	if l.RootOpaque() {
		t.Error("RootOpaque without a marker on the root")
	}
}

func TestXattrs(t *testing.T) {
	h := &tar.Header{PAXRecords: map[string]string{
		"SCHILY.xattr.user.a":           "raw",
		"LIBARCHIVE.xattr.user.a":       "bG9zZXM=", // SCHILY's wins
		"LIBARCHIVE.xattr.user.%62":     "Yg==",     // padded
		"LIBARCHIVE.xattr.user.c":       "Yw",       // unpadded
		"SCHILY.xattr.trusted.x":        "",
		"GNU.sparse.name":               "not an xattr",
		"LIBARCHIVE.creationtime":       "1",
		"SCHILY.xattr.security.selinux": "ctx",
	}}
	got, err := Xattrs(h)
	want := map[string]string{"user.a": "raw", "user.b": "b", "user.c": "c", "trusted.x": "", "security.selinux": "ctx"}
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("Xattrs = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"LIBARCHIVE.xattr.user.%zz", "LIBARCHIVE.xattr.user.d"} {
		h := &tar.Header{PAXRecords: map[string]string{bad: "!!"}}
		if got, err := Xattrs(h); err == nil {
			t.Errorf("Xattrs(%s) = %q, want an error", bad, got)
		}
	}
}
