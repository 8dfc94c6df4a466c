package convert

import (
	"context"
	"slices"
	"strings"
	"sync"

	"github.com/ocierofs/ocierofs/erofs"
)

// A layer's directories, as the layers below it leave them, decide what a
// directory the layer implies (lists a child of, but not itself) looks like:
// applying the tars in order keeps the lower directory's mode, owner, mtime
// and xattrs, and the stacked EROFS layers must show the same. Each layer
// records what it did to the tree while it is read (dirOps); a layer asks
// for the state below it only at Finish, so layers still convert
// concurrently.

type dirOpKind uint8

const (
	opDir      dirOpKind = iota // a directory entry (meta set)
	opNonDir                    // a non-directory at path: hides what was there
	opWhiteout                  // deletes path and everything below it
	opOpaque                    // hides everything below path from lower layers
)

type dirOp struct {
	kind dirOpKind
	path string
	meta *erofs.Entry
}

// dirOps is one layer's record; done is closed when the layer's tar has
// been read completely (or failed: then ok is false).
type dirOps struct {
	ops  []dirOp
	done chan struct{}
	once sync.Once
	ok   bool
	// hides are the layer's whiteouts and opaque markers by path, made
	// for hidesBelow once the layer is read.
	hides map[string]dirOpKind
}

func newDirOps() *dirOps { return &dirOps{done: make(chan struct{})} }

// anyFailed reports that one of ops is finished and failed.
func anyFailed(ops []*dirOps) bool {
	for _, d := range ops {
		select {
		case <-d.done:
			if !d.ok {
				return true
			}
		default:
		}
	}
	return false
}

func (d *dirOps) add(kind dirOpKind, p string, meta *erofs.Entry) {
	if d == nil {
		return
	}
	// A copy, stored under another name: meta itself never reaches the
	// heap, so the caller's entry can stay on its stack.
	var kept *erofs.Entry
	if meta != nil {
		m := *meta
		m.Xattrs = append([]erofs.Xattr(nil), meta.Xattrs...)
		kept = &m
	}
	d.ops = append(d.ops, dirOp{kind, p, kept})
}

// hidesBelow reports whether the layer, read to its end, hides what the
// layers below have at p: it whites out p or a directory above it, or
// makes a directory above it opaque. A directory the layer implies there
// is a new one, without the metadata of one below (an opaque marker on p
// itself keeps p's).
func (d *dirOps) hidesBelow(p string) bool {
	if d == nil {
		return false
	}
	if d.hides == nil {
		d.hides = map[string]dirOpKind{}
		for _, op := range d.ops {
			if op.kind == opWhiteout || op.kind == opOpaque && d.hides[op.path] != opWhiteout {
				d.hides[op.path] = op.kind
			}
		}
	}
	for q := p; ; {
		if k, ok := d.hides[q]; ok && (k == opWhiteout || q != p) {
			return true
		}
		if q == "" {
			return false
		}
		if i := strings.LastIndexByte(q, '/'); i >= 0 {
			q = q[:i]
		} else {
			q = ""
		}
	}
}

// finish publishes the record; only the first call counts.
func (d *dirOps) finish(ok bool) {
	if d == nil {
		return
	}
	d.once.Do(func() {
		d.ok = ok
		close(d.done)
	})
}

// dirTree is the directory state after some layers.
type dirTree struct {
	meta     *erofs.Entry // nil: no entry declared it
	children map[string]*dirTree
	// names, of the root only, are all its entries, directories or not
	// (lowerDirs.rootNames): a layer's opaque marker on the root clears
	// those of the layers below, and its entries add theirs.
	names map[string]bool
}

func (t *dirTree) child(name string, create bool) *dirTree {
	c := t.children[name]
	if c == nil && create {
		if t.children == nil {
			t.children = map[string]*dirTree{}
		}
		c = &dirTree{}
		t.children[name] = c
	}
	return c
}

// walk returns the node at p (nil if missing), its parent and its name;
// with create, missing nodes on the way are made.
func (t *dirTree) walk(p string, create bool) (parent, n *dirTree, base string) {
	n = t
	if p == "" {
		return nil, t, ""
	}
	for _, c := range strings.Split(p, "/") {
		parent, base = n, c
		if n = n.child(c, create); n == nil {
			return parent, nil, c
		}
	}
	return parent, n, base
}

// applyLayer applies one layer's record: its opaque markers first, as
// they act on the layers below only, then its entries and whiteouts in
// order. In the tar, a directory's entries may come before its opaque
// marker ("-sub" sorts before ".wh..wh..opq"); the marker must not clear
// them. A whiteout, though, deletes what the layer put at its path before
// it too, as docker, containerd and mkfs.erofs --aufs apply it.
func (t *dirTree) applyLayer(ops []dirOp) {
	for _, op := range ops {
		if op.kind == opOpaque {
			t.apply(op)
		}
	}
	if t.names == nil {
		t.names = map[string]bool{}
	}
	for _, op := range ops {
		if op.kind != opOpaque {
			t.apply(op)
		}
		switch first, _, deeper := strings.Cut(op.path, "/"); {
		case op.path == "":
		case op.kind == opWhiteout && !deeper:
			delete(t.names, first)
		default: // an entry at first, or below it, which makes it a directory
			t.names[first] = true
		}
	}
}

func (t *dirTree) apply(op dirOp) {
	switch op.kind {
	case opDir:
		_, n, _ := t.walk(op.path, true)
		n.meta = op.meta
	case opNonDir, opWhiteout:
		if op.path == "" {
			return
		}
		if parent, n, base := t.walk(op.path, false); n != nil && parent != nil {
			delete(parent.children, base)
		}
	case opOpaque:
		if _, n, _ := t.walk(op.path, false); n != nil {
			n.children = nil
		}
		if op.path == "" {
			clear(t.names) // the layers below: the layer's own names come after
		}
	}
}

// lowerDirs serves the implied-directory lookups of the layers of one image.
type lowerDirs struct {
	ctx    context.Context
	layers []*dirOps
	mu     sync.Mutex
	states map[int]*dirTree
	// broken: a layer below was needed and did not convert (or the
	// wait was given up), so implied directories got no metadata from
	// below: the layer must fail, not be kept (a Converter runs failed
	// jobs again and would reuse it).
	broken bool
}

// failed reports that a layer below was needed and missing.
func (l *lowerDirs) failed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.broken
}

// below returns the directory state under layer i (after layers 0..i-1),
// waiting until those layers have been read.
func (l *lowerDirs) below(i int) *dirTree {
	for _, d := range l.layers[:i] {
		select {
		case <-d.done:
		case <-l.ctx.Done():
		}
		if l.ctx.Err() != nil || !d.ok {
			l.mu.Lock()
			l.broken = true
			l.mu.Unlock()
			return nil
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.states[i]; ok {
		return t
	}
	t := &dirTree{}
	for _, d := range l.layers[:i] {
		t.applyLayer(d.ops)
	}
	l.states[i] = t
	return t
}

// rootNames returns, sorted, the names at the root under layer i; ok is
// false when a layer below did not convert.
func (l *lowerDirs) rootNames(i int) (names []string, ok bool) {
	t := l.below(i)
	if t == nil {
		return nil, false
	}
	for n := range t.names {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, true
}

// impliedFor returns the erofs.Options.ImpliedDir hook of layer i.
func (l *lowerDirs) impliedFor(i int) func(string) (erofs.Entry, bool) {
	if i == 0 {
		return nil
	}
	return func(p string) (erofs.Entry, bool) {
		t := l.below(i)
		if t == nil {
			return erofs.Entry{}, false
		}
		_, n, _ := t.walk(p, false)
		if n == nil || n.meta == nil {
			return erofs.Entry{}, false
		}
		e := *n.meta
		e.Path = p
		// A tar's trusted.overlay.* xattrs never got here (headerMeta
		// leaves them out, unless whiteouts are kept as they are).
		e.Xattrs = slices.Clone(e.Xattrs)
		return e, true
	}
}
