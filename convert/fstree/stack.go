package fstree

import (
	"archive/tar"
	"fmt"
	"io"
	"time"
)

// Stack is the tree of layers applied in order, as overlayfs shows them
// stacked and as applying their tars one after another leaves it:
// whiteouts delete what the layers below have (and what the layer put at
// the path before them, as docker, containerd and mkfs.erofs --aufs apply
// them), an opaque directory hides their entries in it, a directory over
// a directory keeps its children, a hard link may name a lower layer's
// file. Whiteouts and the overlay xattrs are not in it.
type Stack struct {
	b       *tarBuilder
	implied time.Time
}

// NewStack returns the stack of no layers: a root directory, implied,
// whose mtime is impliedDirMtime, as are those of the directories layers
// imply where none is below.
func NewStack(impliedDirMtime time.Time) *Stack {
	b := &tarBuilder{
		t:        newTree(),
		children: make(map[string]map[string]struct{}),
		implied:  impliedDirMtime,
		buf:      make([]byte, 128<<10),
		stack:    true,
		layer:    make(map[string]bool),
	}
	b.put(b.impliedDir("."))
	return &Stack{b: b, implied: impliedDirMtime}
}

// Tree is the stack's tree so far. It changes with the next Layer.
func (s *Stack) Tree() *Tree { return s.b.t }

// Layer reads the next layer's tar, uncompressed, and lays it on the
// stack. It returns the layer's own tree, as FromTar reads it (overlay
// whiteouts), but for the directories the layer implies: they are as the
// layers below leave them, where one of those declared them and the layer
// does not hide it (a whiteout of it or above it, an opaque directory
// above it), since applying the tar over them keeps them so. That is what a converter
// makes of the layer over the layers below. A layer that cannot stand
// alone (a hard link to a lower layer's file) has no tree of its own: own
// is nil and ownErr says why, and the stack takes the layer all the same.
func (s *Stack) Layer(r io.Reader) (own *Tree, ownErr, err error) {
	b := &tarBuilder{
		t:         newTree(),
		children:  make(map[string]map[string]struct{}),
		opaque:    make(map[string]bool),
		implied:   s.implied,
		buf:       s.b.buf,
		lower:     s.b.t,
		fromLower: make(map[string]bool),
		whited:    make(map[string]bool),
	}
	b.put(b.impliedDir("."))
	s.b.layer = make(map[string]bool)
	s.b.gone = make(map[string]bool)
	s.b.held = make(map[string]bool)
	// What the layers below have at the root, for an opaque marker on
	// it (rootOpaque).
	var lowerRoot []string
	for kid := range s.b.children["."] {
		lowerRoot = append(lowerRoot, kid)
	}
	err = eachEntry(r, s.b.buf, func(hdr *tar.Header, data *fileData) error {
		// The layer's own tree first: its implied directories look at
		// the stack before this entry changes it.
		if ownErr == nil {
			if err := b.entry(hdr, data, true); err != nil {
				ownErr = fmt.Errorf("fstree: tar entry %q: %w", hdr.Name, err)
			}
		}
		return s.b.entry(hdr, data, true)
	})
	if err != nil {
		return nil, nil, err
	}
	if ownErr != nil {
		return nil, ownErr, nil
	}
	if ownErr = b.rootOpaque(lowerRoot); ownErr != nil {
		return nil, ownErr, nil
	}
	b.hideFromLower()
	b.finish()
	return b.t, nil, nil
}

// rootOpaque gives the layer, if it makes the root opaque, a whiteout of
// each name the layers below have there and it has not, as converters
// make it: overlayfs ignores the opaque marker on the root. Its own
// directories there are opaque.
func (b *tarBuilder) rootOpaque(lower []string) error {
	if b.rootMarker == nil {
		return nil
	}
	for _, p := range lower {
		switch n := b.t.nodes[p]; {
		case n == nil:
			if err := b.whiteout(b.rootMarker, ".", p); err != nil {
				return err
			}
		case n.IsDir():
			b.opaque[p] = true
		}
	}
	return nil
}
