package whiteout

import (
	"archive/tar"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/ocierofs/ocierofs/internal/entrypath"
)

// A Layer is one layer's change set: what applying its tar entries in
// order, as docker and containerd apply them, does to the layers below.
// It holds the headers only, as a tree of the paths the layer touches:
// entries, whiteouts, and the directories it makes or implies, each
// marked opaque where nothing below shows through it. Add takes the
// entries; Tree.Apply lays the layer on a stack; Overlay is the layer as
// overlayfs needs it stacked.
//
// The rules, decided here only:
//
//   - A later entry for a path replaces the earlier one; a directory over
//     a directory keeps its children and takes the later header.
//   - A whiteout (DIR/.wh.NAME, or a character device 0:0, which
//     overlayfs takes for one) deletes NAME of the layers below, and what
//     the layer itself put there before it (docker, containerd and
//     mkfs.erofs --aufs apply it so; the image spec would keep it). A hard
//     link to the layer's whiteout is one too (overlayfs makes them links
//     of one inode).
//   - An opaque marker (DIR/.wh..wh..opq) hides everything the layers
//     below have under DIR, whatever its place in the tar; on the root
//     too, where overlayfs ignores it (Overlay whites out each name
//     instead).
//   - A directory that replaces the layer's whiteout or non-directory
//     (also by way of an entry below it) is new: nothing below shows
//     through it, its metadata neither.
//   - Parents are implied: made where missing, kept where the layers below
//     have a directory. An entry below the layer's own non-directory is
//     refused; below a lower one, the lower one gives way.
//   - A hard link names a file the layer has at that point, or, where the
//     layer has not touched the path, a file of the layers below (as it
//     was before the layer); a link to the layer's directory, or to what
//     the layer removed, is refused.
//   - Other .wh..wh. names are no entries; a PAX global header or a GNU
//     volume label is no file.
type Layer struct {
	mode Mode
	root *Node
	// rootMarker is the header of the layer's first opaque marker on the
	// root.
	rootMarker *tar.Header
	// opaque and whited are the paths the layer made opaque (a marker,
	// a directory made anew) and whited out, at any point: a directory
	// it makes there later is opaque, as converters mark it (the markers
	// are set once the layer is read, whatever came between).
	opaque, whited map[string]bool
	// lowerLinks are the layer's hard links to the layers below, in
	// order, also those it has since replaced or removed: docker and
	// containerd made each, and failed where the target was missing.
	lowerLinks []*Node
}

// A Node is one path of a Layer or a Tree.
type Node struct {
	// Hdr is the header that gives the node's metadata and, for a file,
	// its content; nodes with one Hdr are hard links of one inode. It is
	// nil for a directory no entry declared (an implied one: mode 0755,
	// owner 0, as converters make it). For a whiteout, it is the .wh.
	// entry's (a character device with no permission bits, of its owner
	// and time) or the device 0:0's (as the tar has it).
	Hdr *tar.Header
	// Whiteout marks a whiteout: in a Layer, an overlay form (Overlay), a
	// character device 0:0.
	Whiteout bool
	// Opaque marks a directory that hides what the layers below have in
	// it: its layer put an opaque marker on it, or made it anew (in an
	// overlay form: trusted.overlay.opaque="y").
	Opaque bool
	// Origin marks, in an overlay form, a directory that holds a
	// whiteout: it gets an empty trusted.overlay.origin, as mkfs.erofs
	// --aufs gives it, so overlayfs never lists the device through a
	// directory it does not merge.
	Origin bool

	dir   bool
	fresh bool   // a directory the layer made anew: nothing below shows through, metadata neither
	lower string // a hard link to this path of the layers below
	kids  map[string]*Node
}

// IsDir reports whether n is a directory.
func (n *Node) IsDir() bool { return n.dir }

// Named reports whether n is a whiteout its tar spells as a .wh. name
// (its inode: a character device 0:0 with no permission bits and no
// xattrs, of the entry's owner and time), not as a device 0:0 (kept as
// the tar has it).
func (n *Node) Named() bool {
	return n.Whiteout && strings.HasPrefix(path.Base(n.Hdr.Name), Prefix)
}

// LowerLink is the path of the lower layers' file a hard link of a Layer
// names; "" for any other node.
func (n *Node) LowerLink() string { return n.lower }

func newDir(h *tar.Header) *Node { return &Node{Hdr: h, dir: true, kids: map[string]*Node{}} }

// NewLayer returns the change set of an empty layer. With Keep, the tar
// is taken as it is: whiteouts and opaque markers are plain files, a
// device 0:0 is a device. With Lowerdir, the entries are a layer in
// overlayfs's form, whiteouts devices 0:0 and opaque directories xattrs.
func NewLayer(m Mode) *Layer {
	return &Layer{mode: m, root: newDir(nil), opaque: map[string]bool{}, whited: map[string]bool{}}
}

// Add takes the layer's next tar header, which the Layer keeps (do not
// change it). Its error names the entry.
func (l *Layer) Add(h *tar.Header) error {
	if err := l.add(h); err != nil {
		return fmt.Errorf("entry %q: %w", h.Name, err)
	}
	return nil
}

func (l *Layer) add(h *tar.Header) error {
	switch h.Typeflag {
	case tar.TypeXGlobalHeader, 'V':
		return nil
	}
	p, err := Clean(h.Name)
	if err != nil {
		return err
	}
	dir, base := path.Dir(p), path.Base(p)
	if l.mode == Overlay && p != "." {
		switch {
		case base == OpaqueMarker:
			if dir == "." && l.rootMarker == nil {
				l.rootMarker = h
			}
			return l.markOpaque(dir)
		case strings.HasPrefix(base, MetaPrefix):
			return nil
		case strings.HasPrefix(base, Prefix):
			name := base[len(Prefix):]
			if name == "" || name == "." || name == ".." {
				return fmt.Errorf("whiteout %q names no entry", base)
			}
			return l.put(dir, name, &Node{Hdr: h, Whiteout: true})
		case isDevice0(h):
			return l.put(dir, base, &Node{Hdr: h, Whiteout: true})
		}
	}
	if l.mode == Lowerdir && p != "." {
		switch {
		case isDevice0(h):
			return l.put(dir, base, &Node{Hdr: h, Whiteout: true})
		case h.Typeflag == tar.TypeDir && h.PAXRecords["SCHILY.xattr."+OpaqueXattr] == "y":
			if err := l.put(dir, base, newDir(h)); err != nil {
				return err
			}
			return l.markOpaque(p)
		}
	}
	if h.Typeflag == tar.TypeLink {
		n, err := l.link(h)
		if err != nil {
			return err
		}
		return l.put(dir, base, n)
	}
	if p == "." {
		if h.Typeflag != tar.TypeDir {
			return errors.New("the root must be a directory")
		}
		l.root.Hdr = h
		return nil
	}
	if h.Typeflag == tar.TypeDir {
		return l.put(dir, base, newDir(h))
	}
	return l.put(dir, base, &Node{Hdr: h})
}

// put places n at dir/name. A directory over the layer's directory takes
// its place's children and marks; over its whiteout or non-directory it
// is a new one.
func (l *Layer) put(dir, name string, n *Node) error {
	d, err := l.dir(dir)
	if err != nil {
		return err
	}
	p := path.Join(dir, name)
	old := d.kids[name]
	switch {
	case n.Whiteout:
		l.whited[p] = true
	case n.dir && old != nil && old.dir:
		old.Hdr = n.Hdr
		return nil
	case n.dir:
		n.fresh = old != nil || l.whited[p]
		l.opaque[p] = l.opaque[p] || n.fresh
		n.Opaque = l.opaque[p]
	}
	d.kids[name] = n
	return nil
}

// markOpaque makes the layer's directory at p opaque.
func (l *Layer) markOpaque(p string) error {
	d, err := l.dir(p)
	if err != nil {
		return err
	}
	d.Opaque, l.opaque[p] = true, true
	return nil
}

// dir returns the layer's directory at p, implying it and its parents
// where missing; one made where the layer whited out is a new one.
func (l *Layer) dir(p string) (*Node, error) {
	d := l.root
	if p == "." {
		return d, nil
	}
	parts := strings.Split(p, "/")
	for i, c := range parts {
		k := d.kids[c]
		switch {
		case k == nil || k.Whiteout:
			q := strings.Join(parts[:i+1], "/")
			fresh := k != nil
			l.opaque[q] = l.opaque[q] || fresh
			k = newDir(nil)
			k.fresh, k.Opaque = fresh, l.opaque[q]
			d.kids[c] = k
		case !k.dir:
			return nil, fmt.Errorf("parent %q is not a directory", strings.Join(parts[:i+1], "/"))
		}
		d = k
	}
	return d, nil
}

// link is the node of the hard link h: the layer's file at its target, or
// its whiteout there, or a link to the layers below where the layer has
// not touched the target.
func (l *Layer) link(h *tar.Header) (*Node, error) {
	t, err := Clean(h.Linkname)
	if err != nil {
		return nil, fmt.Errorf("hard link target %q: %w", h.Linkname, err)
	}
	if t == "." {
		return nil, errors.New("hard link to the root")
	}
	d, hidden := l.root, l.root.Opaque
	parts := strings.Split(t, "/")
	for i, c := range parts {
		k := d.kids[c]
		last := i == len(parts)-1
		switch {
		case k == nil && hidden:
			return nil, fmt.Errorf("hard link to %q, which its layer removed", t)
		case k == nil:
			n := &Node{Hdr: h, lower: t}
			l.lowerLinks = append(l.lowerLinks, n)
			return n, nil
		case last && k.Whiteout:
			return &Node{Hdr: k.Hdr, Whiteout: true}, nil
		case last && k.dir:
			return nil, fmt.Errorf("hard link to the directory %q", t)
		case last && k.lower != "":
			n := &Node{Hdr: k.Hdr, lower: k.lower} // to the same file below
			l.lowerLinks = append(l.lowerLinks, n)
			return n, nil
		case last:
			return &Node{Hdr: k.Hdr}, nil
		case k.Whiteout:
			return nil, fmt.Errorf("hard link to %q, which its layer removed", t)
		case !k.dir:
			return nil, fmt.Errorf("hard link to %q: %q is not a directory", t, strings.Join(parts[:i+1], "/"))
		}
		d, hidden = k, hidden || k.Opaque || k.fresh
	}
	panic("unreachable")
}

// Node returns the layer's node at p so far ("." or "" for the root), or
// nil where the layer has not touched p.
func (l *Layer) Node(p string) *Node { return (&Tree{root: l.root}).Node(p) }

// Walk calls fn for each node of the layer as Tree.Walk does: what the
// layer has at its end (a hard link to the layers below is a node whose
// LowerLink names its target).
func (l *Layer) Walk(fn func(p string, n *Node) error) error {
	return (&Tree{root: l.root}).Walk(fn)
}

// RootOpaque reports whether the layer has an opaque marker on the root,
// which hides everything below: overlayfs ignores the marker there, so
// Overlay gives the layer a whiteout of each name below instead.
func (l *Layer) RootOpaque() bool { return l.rootMarker != nil }

// Covers reports whether the layer, read so far, leaves nothing of what
// the layers below have at p, a file there: the layer has an entry or a
// whiteout at p or a non-directory above it, or made a directory above p
// opaque or anew.
func (l *Layer) Covers(p string) bool {
	d, above := l.root, l.root.Opaque
	for c := range strings.SplitSeq(p, "/") {
		if !d.dir {
			return true
		}
		k := d.kids[c]
		switch {
		case k == nil:
			return above
		case above || k.fresh:
			return true
		}
		d, above = k, k.Opaque
	}
	return true
}

// Overlay is the layer as overlayfs needs it over the layers below
// (below: the stack of those, nil for none), the tree a converter writes
// into the layer's image: the entries; whiteouts, which stay character
// devices; markers Opaque and Origin for the xattrs; and the directories
// the layer implies with the header of the one below, where that is a
// declared directory and the layer does not hide it (a whiteout of it, an
// opaque directory above it), since applying the tar over it keeps it.
// An opaque marker on the root gives the layer a whiteout, with the
// marker's header, of each name below it has not, and makes its own
// directories there opaque. A hard link to a file below has no overlay
// form (one layer's image cannot link into another's): that is an error.
func (l *Layer) Overlay(below *Tree) (*Tree, error) {
	if len(l.lowerLinks) > 0 {
		k := l.lowerLinks[0]
		return nil, fmt.Errorf("entry %q: hard link to %q, a file of a layer below", k.Hdr.Name, k.lower)
	}
	var lower *Node
	if below != nil {
		lower = below.root
	}
	root := newDir(l.root.Hdr)
	root.Opaque = l.root.Opaque
	if root.Hdr == nil && lower != nil {
		root.Hdr = lower.Hdr
	}
	if err := overlayDir(root, l.root, lower, l.root.Opaque); err != nil {
		return nil, err
	}
	if l.rootMarker != nil && lower != nil {
		for _, name := range slices.Sorted(maps.Keys(lower.kids)) {
			switch k := root.kids[name]; {
			case k == nil:
				h := *l.rootMarker // one inode each
				root.kids[name] = &Node{Hdr: &h, Whiteout: true}
				root.Origin = true
			case k.dir:
				k.Opaque = true
			}
		}
	}
	return &Tree{root: root}, nil
}

// overlayDir fills out, the overlay form of the layer's directory d, over
// lower (nil: none); hidden says that nothing below shows in d.
func overlayDir(out, d, lower *Node, hidden bool) error {
	for _, name := range slices.Sorted(maps.Keys(d.kids)) {
		k := d.kids[name]
		o := &Node{Hdr: k.Hdr, Whiteout: k.Whiteout, Opaque: k.Opaque || k.fresh, dir: k.dir}
		out.kids[name] = o
		if k.Whiteout {
			out.Origin = true
		}
		if !k.dir {
			continue
		}
		o.kids = map[string]*Node{}
		var lk *Node
		if lower != nil && !hidden && !k.fresh {
			if lk = lower.kids[name]; lk != nil && !lk.dir {
				lk = nil
			}
		}
		if o.Hdr == nil && lk != nil {
			o.Hdr = lk.Hdr
		}
		if err := overlayDir(o, k, lk, hidden || o.Opaque); err != nil {
			return err
		}
	}
	return nil
}

// Clean maps a tar entry name to a path: no leading "/" or "./", cleaned,
// "." for the root. A name that holds NUL or climbs above the root is an
// error.
func Clean(name string) (string, error) {
	p, err := entrypath.Clean(name)
	if p == "" && err == nil {
		p = "."
	}
	return p, err
}

// isDevice0 reports a character device 0:0, overlayfs's whiteout.
func isDevice0(h *tar.Header) bool {
	return h.Typeflag == tar.TypeChar && h.Devmajor == 0 && h.Devminor == 0
}
