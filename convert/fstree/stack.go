package fstree

import (
	"archive/tar"
	"io"
	"time"

	"github.com/ocierofs/ocierofs/whiteout"
)

// Stack is the tree of layers applied in order, as overlayfs shows them
// stacked and as applying their tars one after another leaves it, by the
// rules of whiteout.Tree.Apply. Whiteouts and the overlay xattrs are not
// in it.
type Stack struct {
	t       *whiteout.Tree
	nodes   map[*tar.Header]*Node // of every layer's headers
	implied time.Time
	buf     []byte
}

// NewStack returns the stack of no layers: a root directory, implied,
// whose mtime is impliedDirMtime, as are those of the directories layers
// imply where none is below.
func NewStack(impliedDirMtime time.Time) *Stack {
	return &Stack{t: whiteout.NewTree(), nodes: make(map[*tar.Header]*Node), implied: impliedDirMtime, buf: make([]byte, 128<<10)}
}

// Tree is the stack's tree so far.
func (s *Stack) Tree() *Tree { return treeOf(s.t, s.nodes, s.implied) }

// Layer reads the next layer's tar, uncompressed, and lays it on the
// stack. It returns the layer's own tree, its overlay form over the
// layers below (whiteout.Layer.Overlay), FromTar's but for the
// directories the layer implies over declared ones below: that is what a
// converter makes of the layer over the layers below. A layer that
// cannot stand alone (a hard link to a lower layer's file) has no tree of
// its own: own is nil and ownErr says why, and the stack takes the layer
// all the same.
func (s *Stack) Layer(r io.Reader) (own *Tree, ownErr, err error) {
	l, err := readLayer(r, s.buf, whiteout.Overlay, s.nodes)
	if err != nil {
		return nil, nil, err
	}
	ov, ownErr := l.Overlay(s.t)
	if err := s.t.Apply(l); err != nil {
		return nil, nil, err
	}
	if ownErr != nil {
		return nil, ownErr, nil
	}
	return treeOf(ov, s.nodes, s.implied), nil, nil
}
