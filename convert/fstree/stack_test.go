package fstree

import (
	"archive/tar"
	"bytes"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/erofs"
)

// layerTar is a tar of hdrs, each regular file with its name as content.
func layerTar(t *testing.T, hdrs ...tar.Header) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		var data []byte
		if h.Typeflag == tar.TypeReg {
			data = []byte(h.Name)
			h.Size = int64(len(data))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		tw.Write(data)
	}
	tw.Close()
	return bytes.NewReader(buf.Bytes())
}

func dirHdr(name string, mode int64, uid int) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode, Uid: uid, ModTime: time.Unix(1000, 0)}
}

func fileHdr(name string) tar.Header {
	return tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644}
}

// TestStack: what a layer's whiteouts and opaque directories hide is the
// layers' below, never its own entries; a hard link may name a lower
// layer's file; a directory a layer implies is as the layers below leave
// it, in the stack and in the layer's own tree.
func TestStack(t *testing.T) {
	s := NewStack(time.Time{})
	layer := func(hdrs ...tar.Header) (*Tree, error) {
		t.Helper()
		own, ownErr, err := s.Layer(layerTar(t, hdrs...))
		if err != nil {
			t.Fatal(err)
		}
		return own, ownErr
	}
	if _, err := layer(dirHdr("etc", 0o750, 7), fileHdr("etc/a"), dirHdr("o", 0o700, 0), fileHdr("o/low"), fileHdr("gone"), fileHdr("t")); err != nil {
		t.Fatal(err)
	}
	own, err := layer(
		fileHdr("etc/b"),  // etc/ implied: layer 1's
		fileHdr("o/mine"), // listed before the opaque marker: stays
		fileHdr("o/.wh..wh..opq"),
		fileHdr("new"), fileHdr(".wh.new"), // its own entry: deleted too, as docker and containerd apply it
		fileHdr(".wh.gone"),
	)
	if err != nil {
		t.Fatal(err)
	}
	// A link to layer 1's t: the stack takes it, the layer has no tree of
	// its own.
	if lt, err := layer(tar.Header{Name: "lt", Typeflag: tar.TypeLink, Linkname: "t"}); lt != nil || err == nil {
		t.Errorf("a link to a lower layer: own tree %v, error %v", lt, err)
	}
	got := s.Tree()
	for p, want := range map[string]bool{"etc/a": true, "etc/b": true, "o/low": false, "o/mine": true, "new": false, "gone": false, "t": true, "lt": true} {
		if (got.Node(p) != nil) != want {
			t.Errorf("stack: %s there: %v, want %v", p, got.Node(p) != nil, want)
		}
	}
	if g := got.LinkGroups(); len(g) != 1 || len(g[0]) != 2 {
		t.Errorf("stack: link groups %q, want lt and t", g)
	}
	for _, tr := range []*Tree{got, own} {
		if e := tr.Node("etc"); e == nil || e.Mode != erofs.S_IFDIR|0o750 || e.Uid != 7 || e.Implied {
			t.Errorf("etc: %+v, want layer 1's directory", e)
		}
	}
	if o := got.Node("o"); o == nil || len(o.Xattrs) != 0 {
		t.Errorf("o: %+v, want no overlay xattrs in the stack", o)
	}
	// The layer's own tree keeps the overlay form.
	if o := own.Node("o"); o == nil || o.Xattrs["trusted.overlay.opaque"] != "y" {
		t.Errorf("own tree: o %+v, want opaque", o)
	}
	if g := own.Node("gone"); g == nil || !isWhiteoutDev(g) {
		t.Errorf("own tree: gone %+v, want a whiteout", g)
	}
}

// TestStackOpaque: an opaque directory hides all the layers below left in
// it, however deep, whichever order the layer lists its entries in; the
// directories that hold the layer's entries stay, with the lower layers'
// metadata gone where the layer does not declare them. Whiteouts and
// opaque markers make their parents, and a directory a layer puts where
// a lower layer has a file replaces it.
func TestStackOpaque(t *testing.T) {
	s := NewStack(time.Time{})
	for i, l := range [][]tar.Header{
		{dirHdr("o", 0o755, 0), dirHdr("o/-imp", 0o700, 5), fileHdr("o/-imp/x"), dirHdr("o/-dec", 0o700, 5), fileHdr("o/-dec/x"), fileHdr("f")},
		{
			fileHdr("o/-imp/y"),        // o/-imp implied, listed before the marker
			dirHdr("o/-dec", 0o711, 6), // declared before the marker
			fileHdr("o/.wh..wh..opq"),
			fileHdr("n/.wh..wh..opq"), // a new directory, made by its marker
			fileHdr("w/.wh.x"),        // and by a whiteout
			fileHdr("f/z"),            // a directory where layer 1 has a file
		},
	} {
		if _, _, err := s.Layer(layerTar(t, l...)); err != nil {
			t.Fatalf("layer %d: %v", i+1, err)
		}
	}
	got := s.Tree()
	for p, want := range map[string]bool{"o/-imp/x": false, "o/-imp/y": true, "o/-dec/x": false, "o/-dec": true, "n": true, "w": true, "f/z": true} {
		if (got.Node(p) != nil) != want {
			t.Errorf("%s there: %v, want %v", p, got.Node(p) != nil, want)
		}
	}
	if n := got.Node("o/-imp"); n == nil || n.Uid != 0 || n.Perm() != 0o755 || !n.Implied {
		t.Errorf("o/-imp: %+v, want an implied directory, not layer 1's", n)
	}
	if n := got.Node("o/-dec"); n == nil || n.Uid != 6 || n.Perm() != 0o711 {
		t.Errorf("o/-dec: %+v, want layer 2's", n)
	}
	if n := got.Node("f"); n == nil || !n.IsDir() {
		t.Errorf("f: %+v, want a directory", n)
	}
}
