package convert

import (
	"context"
	"sync"

	"github.com/ocierofs/ocierofs/whiteout"
)

// A layer's directories, as the layers below it leave them, decide what a
// directory the layer implies (lists a child of, but not itself) looks like:
// applying the tars in order keeps the lower directory's mode, owner, mtime
// and xattrs, and the stacked EROFS layers must show the same. Each layer
// keeps its change set (whiteout.Layer) while it is read (dirOps); a layer
// asks for the stack below it once its tar is read, so layers still convert
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

// stackBelow returns the stack of the layers of lower, bottom first,
// once each has been read; ok is false when one failed or the wait was
// given up (the layer above must then fail, not be kept: a Converter runs
// failed jobs again and would reuse it), or when a hard link of one to
// the layers below it is refused.
func stackBelow(ctx context.Context, lower []*dirOps) (t *whiteout.Tree, ok bool) {
	t = whiteout.NewTree()
	for _, d := range lower {
		select {
		case <-d.done:
		case <-ctx.Done():
		}
		if ctx.Err() != nil || !d.ok || t.Apply(d.layer) != nil {
			return nil, false
		}
	}
	return t, true
}
