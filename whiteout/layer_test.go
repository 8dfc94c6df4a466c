package whiteout

import (
	"archive/tar"
	"fmt"
	"path"
	"strings"
	"testing"
)

// layerOf reads a layer written one entry a word: "f:p" a file, "d:p" a
// directory, "D:p" one with trusted.overlay.opaque=y, "s:p" a symlink,
// "c:p" a device 0:0, "w:p" a whiteout of p, "o:p" an opaque marker in p,
// "l:p:t" a hard link to t. A first word "lowerdir" reads the layer in
// that mode. Each header's Uname is "L<layer>" so that trees show whose
// file a path holds.
func layerOf(t *testing.T, layer int, spec string) (*Layer, error) {
	t.Helper()
	l := NewLayer(Overlay)
	for _, w := range strings.Fields(spec) {
		if w == "lowerdir" {
			l.mode = Lowerdir
			continue
		}
		parts := strings.Split(w, ":")
		h := &tar.Header{Name: parts[1], Mode: 0o644, Uname: fmt.Sprintf("L%d", layer)}
		switch parts[0] {
		case "f":
			h.Typeflag = tar.TypeReg
		case "d":
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case "D":
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
			h.PAXRecords = map[string]string{"SCHILY.xattr." + OpaqueXattr: "y"}
		case "s":
			h.Typeflag, h.Linkname = tar.TypeSymlink, "x"
		case "c":
			h.Typeflag = tar.TypeChar
		case "w":
			h.Typeflag, h.Name = tar.TypeReg, path.Join(path.Dir(parts[1]), Prefix+path.Base(parts[1]))
		case "o":
			h.Typeflag, h.Name = tar.TypeReg, parts[1]+"/"+OpaqueMarker
		case "l":
			h.Typeflag, h.Linkname = tar.TypeLink, parts[2]
		default:
			t.Fatalf("bad entry %q", w)
		}
		if err := l.Add(h); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// show is t, one path a word: "p/" a directory (with "*" if implied and
// the layer of its header else), "p=L1" a file of layer 1, "p~L1" a
// whiteout, "+o" opaque, "+g" origin, "#n" the n-th inode of a link
// group.
func show(t *Tree) string {
	var out []string
	ids := map[*tar.Header]int{}
	count := map[*tar.Header]int{}
	t.Walk(func(p string, n *Node) error {
		if !n.dir {
			count[n.Hdr]++
		}
		return nil
	})
	t.Walk(func(p string, n *Node) error {
		s := p
		switch {
		case n.dir && n.Hdr == nil:
			s += "/*"
		case n.dir:
			s += "/" + n.Hdr.Uname
		case n.Whiteout:
			s += "~" + n.Hdr.Uname
		default:
			s += "=" + n.Hdr.Uname
		}
		if !n.dir && count[n.Hdr] > 1 {
			if ids[n.Hdr] == 0 {
				ids[n.Hdr] = len(ids) + 1
			}
			s += fmt.Sprintf("#%d", ids[n.Hdr])
		}
		if n.Opaque {
			s += "+o"
		}
		if n.Origin {
			s += "+g"
		}
		out = append(out, s)
		return nil
	})
	return strings.Join(out, " ")
}

// stackOf applies layers in order; it returns the merged tree, the last
// layer's overlay form over the ones below, or the first error.
func stackOf(t *testing.T, layers ...string) (merged, top string, err error) {
	t.Helper()
	tr := NewTree()
	for i, spec := range layers {
		l, err := layerOf(t, i+1, spec)
		if err != nil {
			return "", "", fmt.Errorf("layer %d: %w", i+1, err)
		}
		if i == len(layers)-1 {
			if o, err := l.Overlay(tr); err != nil {
				top = "error: " + err.Error()
			} else {
				top = show(o)
			}
		}
		if err := tr.Apply(l); err != nil {
			return "", "", fmt.Errorf("layer %d: %w", i+1, err)
		}
	}
	return show(tr), top, nil
}

func TestStackRules(t *testing.T) {
	for _, c := range []struct {
		name   string
		layers []string
		merged string // or the error
		top    string // the top layer's overlay form
	}{
		{"whiteout and opaque marker make their directories",
			[]string{"d:. f:a", "o:d w:e/x"},
			"./L1 a=L1 d/* e/*",
			"./L1 d/*+o e/*+g e/x~L2"},
		{"directory then file then implied directory",
			[]string{"d:. d:d f:d/x", "f:d", "f:d/y"},
			"./L1 d/* d/y=L3",
			"./L1 d/* d/y=L3"},
		{"whiteout, then implied above: a new directory",
			[]string{"d:. d:d f:d/x", "w:d", "f:d/y"},
			"./L1 d/* d/y=L3",
			"./L1 d/* d/y=L3"},
		{"opaque keeps its directory's metadata, an implied child above takes it",
			[]string{"d:. d:d f:d/x", "o:d f:d/z", "f:d/y"},
			"./L1 d/L1 d/y=L3 d/z=L2",
			"./L1 d/L1 d/y=L3"},
		{"opaque after the layer's own entries keeps them; implied ones are new",
			[]string{"d:. d:o d:o/-sub f:o/-sub/x", "f:o/-sub/y o:o"},
			"./L1 o/L1 o/-sub/* o/-sub/y=L2",
			"./L1 o/L1+o o/-sub/* o/-sub/y=L2"},
		{"deleted and made again in one layer",
			[]string{"d:. d:d f:d/x d:e f:e/w", "w:d d:d f:d/y w:e f:e d:e f:e/z"},
			"./L1 d/L2 d/y=L2 e/L2 e/z=L2",
			"./L1 d/L2+o d/y=L2 e/L2+o e/z=L2"},
		{"entries before their whiteout in one layer",
			[]string{"d:. d:d f:d/x f:f d:e f:e/w", "d:d f:d/y w:d f:f w:f f:e/z w:e f:e/q", "f:d/n"},
			"./L1 d/* d/n=L3 e/* e/q=L2",
			"./L1 d/* d/n=L3"},
		{"file then directory in one layer",
			[]string{"d:. d:d f:d/x", "f:d d:d f:d/y"},
			"./L1 d/L2 d/y=L2",
			"./L1 d/L2+o d/y=L2"},
		{"opaque root",
			[]string{"d:. f:a d:d f:d/x f:e/w", "f:f w:a", "f:b f:d/y o:.", "f:c"},
			"./L1 b=L3 c=L4 d/* d/y=L3",
			"./L1 c=L4"},
		{"opaque root: whiteouts of what is below, its directories opaque",
			[]string{"d:. f:a d:d f:d/x f:e/w", "f:b f:d/y o:."},
			"./L1 b=L2 d/* d/y=L2",
			"./L1+o+g a~L2 b=L2 d/*+o d/y=L2 e~L2"},
		{"opaque marker under its own whiteout",
			[]string{"d:. d:b f:b/x", "w:b o:b f:c"},
			"./L1 b/* c=L2",
			"./L1 b/*+o c=L2"},
		{"character device 0:0",
			[]string{"d:. f:x d:d f:d/w d:e f:e/w", "c:x c:d f:y c:e f:e/n d:n c:n/w f:n/f"},
			"./L1 e/* e/n=L2 n/L2 n/f=L2 y=L2",
			"./L1+g d~L2 e/*+o e/n=L2 n/L2+g n/f=L2 n/w~L2 x~L2 y=L2"},
		{"hard links to whiteouts",
			[]string{"d:. f:a f:z d:m f:m/k", "c:x d:n l:n/y:x f:n/f w:z l:m/k:z l:n/w:m/k"},
			"./L1 a=L1 m/L1 n/L2 n/f=L2",
			"./L1+g m/L1+g m/k~L2#1 n/L2+g n/f=L2 n/w~L2#1 n/y~L2#2 x~L2#2 z~L2#1"},
		{"whiteouts and markers below an opaque marker",
			[]string{"d:. d:p d:p/c f:p/c/b f:p/c/x d:p/e f:p/e/y d:p/f f:p/f/z f:p/w", "w:p/c/b o:p/e o:p w:p/f/z w:p/g/h"},
			"./L1 p/L1 p/c/* p/e/* p/f/* p/g/*",
			"./L1 p/L1+o p/c/*+g p/c/b~L2 p/e/*+o p/f/*+g p/f/z~L2 p/g/*+g p/g/h~L2"},
		{"links to a lower file, before and after the layer replaces it",
			[]string{"d:. f:t f:w", "l:x:w f:w l:y:w l:z:t"},
			"./L1 t=L1#1 w=L2#2 x=L1 y=L2#2 z=L1#1",
			"error: entry \"x\": hard link to \"w\", a file of a layer below"},
		{"a link to nothing", []string{"d:. f:a", "l:l:nowhere"},
			`layer 2: entry "l": hard link to "nowhere", which no layer has`, ""},
		{"a link its layer then replaces still needs its target", []string{"d:. f:a", "d:d l:x:d/y f:x"},
			`layer 2: entry "x": hard link to "d/y", which no layer has`, ""},
		{"links to a link to a lower file", []string{"d:. f:t", "l:x:t l:y:x f:t"},
			"./L1 t=L2 x=L1#1 y=L1#1", "error: entry \"x\": hard link to \"t\", a file of a layer below"},
		{"a link to what the layer removed", []string{"d:. d:d f:d/x", "w:d l:l:d/x"},
			`layer 2: entry "l": hard link to "d/x", which its layer removed`, ""},
		{"a link below the layer's file", []string{"d:. d:d f:d/x", "f:d l:l:d/x"},
			`layer 2: entry "l": hard link to "d/x": "d" is not a directory`, ""},
		{"a link to the layer's directory", []string{"d:. f:x", "d:x l:l:x"},
			`layer 2: entry "l": hard link to the directory "x"`, ""},
		{"a link below an opaque marker", []string{"d:. d:d f:d/x", "o:d l:l:d/x"},
			`layer 2: entry "l": hard link to "d/x", which its layer removed`, ""},
		{"a link to a lower directory", []string{"d:. d:b", "l:a:b"},
			`layer 2: entry "a": hard link to the directory "b"`, ""},
		{"an entry below the layer's file", []string{"d:. f:a", "s:d f:d/c"},
			`layer 2: entry "d/c": parent "d" is not a directory`, ""},
		{"an opaque marker in the layer's file", []string{"d:. f:a", "f:d o:d"},
			`layer 2: entry "d/.wh..wh..opq": parent "d" is not a directory`, ""},
		{"an entry below a lower file", []string{"d:. f:d", "f:d/c"},
			"./L1 d/* d/c=L2", "./L1 d/* d/c=L2"},
		{"a layer in overlayfs's form: devices 0:0, opaque xattrs, .wh. files",
			[]string{"d:. f:f d:d f:d/x d:o f:o/h f:g f:f2d d:d2f f:d2f/y d:k f:k/z",
				"lowerdir D:. c:f c:d c:no D:o f:o/k f:.wh.g o:k d:f2d f:f2d/in f:d2f"},
			"./L2 .wh.g=L2 d2f=L2 f2d/L2 f2d/in=L2 g=L1 k/L1 k/.wh..wh..opq=L2 k/z=L1 o/L2 o/k=L2",
			"./L2+g .wh.g=L2 d~L2 d2f=L2 f~L2 f2d/L2 f2d/in=L2 k/L1 k/.wh..wh..opq=L2 no~L2 o/L2+o o/k=L2"},
		{"the root must be a directory", []string{"f:."},
			`layer 1: entry ".": the root must be a directory`, ""},
	} {
		merged, top, err := stackOf(t, c.layers...)
		if err != nil {
			merged = err.Error()
		}
		if merged != c.merged {
			t.Errorf("%s: merged\n  got  %s\n  want %s", c.name, merged, c.merged)
		}
		if top != c.top {
			t.Errorf("%s: overlay form of the top layer\n  got  %s\n  want %s", c.name, top, c.top)
		}
	}
}

func TestClean(t *testing.T) {
	for in, want := range map[string]string{
		"": ".", ".": ".", "./": ".", "/": ".", "//": ".",
		"a": "a", "/a": "a", "./a": "a", ".//a": "a", "a//b/": "a/b", "///a/./b": "a/b",
		"a/../b": "b", "a/..": ".",
	} {
		if got, err := Clean(in); err != nil || got != want {
			t.Errorf("Clean(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"..", "../x", "/../x", "a/../..", "./../x", "a\x00b"} {
		if got, err := Clean(in); err == nil {
			t.Errorf("Clean(%q) = %q, want error", in, got)
		}
	}
}

// TestStripMarkers: a bottom layer's overlay form without markers keeps
// its entries and loses its whiteouts, opaque and origin markers.
func TestStripMarkers(t *testing.T) {
	l, err := layerOf(t, 0, "d:a f:a/f w:a/gone o:b f:b/g w:nowhere")
	if err != nil {
		t.Fatal(err)
	}
	ov, err := l.Overlay(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !ov.StripMarkers() {
		t.Fatal("StripMarkers found no marker")
	}
	var got []string
	ov.Walk(func(p string, n *Node) error {
		if n.Whiteout || n.Opaque || n.Origin {
			t.Errorf("%s: a marker is left: %+v", p, n)
		}
		got = append(got, p)
		return nil
	})
	if want := ". a a/f b b/g"; strings.Join(got, " ") != want {
		t.Errorf("paths %q, want %q", got, want)
	}
	if ov.StripMarkers() {
		t.Error("StripMarkers found markers a second time")
	}
}
