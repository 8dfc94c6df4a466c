package convert

import (
	"context"
	"sync"

	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

// A layer's directories, as the layers below it leave them, decide what a
// directory the layer implies (lists a child of, but not itself) looks like:
// applying the tars in order keeps the lower directory's mode, owner, mtime
// and xattrs, and the stacked EROFS layers must show the same. Each layer
// keeps its change set (whiteout.Layer) while it is read (dirOps); a layer
// asks for the stack below it only at Finish, so layers still convert
// concurrently.

// dirOps is one layer's change set; done is closed when the layer's tar
// has been read completely (or failed: then ok is false).
type dirOps struct {
	layer *whiteout.Layer
	done  chan struct{}
	once  sync.Once
	ok    bool
}

func newDirOps() *dirOps {
	return &dirOps{layer: whiteout.NewLayer(whiteout.Overlay), done: make(chan struct{})}
}

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

// hidesBelow reports whether the layer, read to its end, hides what the
// layers below have at p (whiteout.Layer.Hides): a directory the layer
// implies there is a new one, without the metadata of one below.
func (d *dirOps) hidesBelow(p string) bool {
	return d != nil && d.layer.Hides(p)
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

// lowerDirs serves the implied-directory lookups of the layers of one image.
type lowerDirs struct {
	ctx    context.Context
	layers []*dirOps
	mu     sync.Mutex
	states map[int]*whiteout.Tree
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

// below returns the stack under layer i (layers 0..i-1), waiting until
// those layers have been read.
func (l *lowerDirs) below(i int) *whiteout.Tree {
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
	if l.states == nil {
		l.states = map[int]*whiteout.Tree{}
	}
	t := whiteout.NewTree()
	for _, d := range l.layers[:i] {
		if err := t.Apply(d.layer); err != nil {
			// A layer below that converted applies: its links to
			// the layers below are refused.
			l.broken = true
			return nil
		}
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
	return t.Names("."), true
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
		n := t.Node(p)
		if n == nil || !n.IsDir() || n.Hdr == nil {
			return erofs.Entry{}, false
		}
		// Its xattrs as the layer's own entry had them (a tar's
		// trusted.overlay.* left out); warnings were given then.
		e := erofs.Entry{Path: p}
		if err := (&tarLayer{wt: whiteout.NewTranslator(whiteout.Overlay)}).headerMeta(n.Hdr, &e); err != nil {
			return erofs.Entry{}, false
		}
		e.Mode |= erofs.S_IFDIR
		return e, true
	}
}
