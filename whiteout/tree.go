package whiteout

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// A Tree is a stack of layers merged, as applying their tars in order
// leaves it and overlayfs shows them stacked (Apply), or one layer's
// overlay form (Layer.Overlay).
type Tree struct{ root *Node }

// NewTree returns the stack of no layers: an implied root directory.
func NewTree() *Tree { return &Tree{root: newDir(nil)} }

// Node returns the node at path p ("." for the root), or nil.
func (t *Tree) Node(p string) *Node {
	n := t.root
	if p == "." || p == "" {
		return n
	}
	for c := range strings.SplitSeq(p, "/") {
		if n = n.kids[c]; n == nil {
			return nil
		}
	}
	return n
}

// Walk calls fn for each node, parents before their children and names
// in byte order, the root (".") first.
func (t *Tree) Walk(fn func(p string, n *Node) error) error {
	if err := fn(".", t.root); err != nil {
		return err
	}
	return walk("", t.root, fn)
}

func walk(dir string, d *Node, fn func(p string, n *Node) error) error {
	for _, name := range slices.Sorted(maps.Keys(d.kids)) {
		p, k := dir+name, d.kids[name]
		if err := fn(p, k); err != nil {
			return err
		}
		if err := walk(p+"/", k, fn); err != nil {
			return err
		}
	}
	return nil
}

// Apply lays l on the stack t. A hard link of l to a file below takes
// that file's inode as t had it before l; one to a path t has no file at
// is refused, and t is left as it was.
func (t *Tree) Apply(l *Layer) error {
	links := map[*Node]*Node{}
	for _, k := range l.lowerLinks {
		target := t.Node(k.lower)
		switch {
		case target == nil:
			return fmt.Errorf("entry %q: hard link to %q, which no layer has", k.Hdr.Name, k.lower)
		case target.dir:
			return fmt.Errorf("entry %q: hard link to the directory %q", k.Hdr.Name, k.lower)
		}
		links[k] = target
	}
	if l.root.Hdr != nil {
		t.root.Hdr = l.root.Hdr
	}
	applyDir(t.root, l.root, l.root.Opaque, links)
	return nil
}

// applyDir applies the layer's directory d to the stack's directory s;
// hidden says that nothing below shows in d, so s keeps only what d has,
// and the layer's directories in it are new ones.
func applyDir(s, d *Node, hidden bool, links map[*Node]*Node) {
	if hidden {
		for name := range s.kids {
			if d.kids[name] == nil {
				delete(s.kids, name)
			}
		}
	}
	for name, k := range d.kids {
		switch {
		case k.Whiteout:
			delete(s.kids, name)
		case !k.dir:
			n := &Node{Hdr: k.Hdr}
			if target := links[k]; target != nil {
				n.Hdr = target.Hdr
			}
			s.kids[name] = n
		default:
			m := s.kids[name]
			if m == nil || !m.dir || hidden || k.fresh {
				m = newDir(nil)
				s.kids[name] = m
			}
			if k.Hdr != nil {
				m.Hdr = k.Hdr
			}
			applyDir(m, k, hidden || k.Opaque || k.fresh, links)
		}
	}
}

// StripMarkers takes the overlayfs markers out of t, an overlay form of a
// layer with nothing below it: its whiteouts are left out, and no
// directory is opaque or has an origin. Such markers hide nothing there,
// and the EROFS image spec forbids them in a bottom layer (§3.6). It
// reports whether there were any.
func (t *Tree) StripMarkers() bool {
	return stripDir(t.root)
}

func stripDir(d *Node) bool {
	found := d.Opaque || d.Origin
	d.Opaque, d.Origin = false, false
	for name, k := range d.kids {
		switch {
		case k.Whiteout:
			delete(d.kids, name)
			found = true
		case k.dir:
			found = stripDir(k) || found
		}
	}
	return found
}
