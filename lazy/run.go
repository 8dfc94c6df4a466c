package lazy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
)

// maxRunChunks bounds the chunks FetchRange asks for in one request: a
// request that fails is tried again whole, and a bounded one keeps what a
// retry costs, and the memory of one, small.
const maxRunChunks = 32

// FetchRange brings the chunks that hold the blob's bytes [off, off+n)
// into the cache with as few requests as it can: each run of consecutive
// chunks the cache lacks (up to maxRunChunks) in one range request. A
// chunk that another reader of this process or another process fetches
// meanwhile is left to it and waited for. It is a background fetch: it
// does not hold back a prefetch.
func (b *Blob) FetchRange(ctx context.Context, off, n int64) error {
	if b.whole || n <= 0 || off >= b.size {
		return nil
	}
	first, last := off/ChunkSize, min(off+n-1, b.size-1)/ChunkSize
	for i := first; i <= last; {
		if err := ctx.Err(); err != nil {
			return err
		}
		run, unlock := b.claimRun(ctx, i, last)
		if len(run) == 0 {
			// Present, or another's to fetch: wait for it as a read
			// would.
			f, err := b.chunk(i, true)
			if err != nil {
				return err
			}
			f.Close()
			i++
			continue
		}
		err := b.fetchRun(ctx, run)
		unlock()
		b.mu.Lock()
		for _, k := range run {
			c := b.flight[k]
			delete(b.flight, k)
			c.err = err
			close(c.done)
		}
		b.mu.Unlock()
		if err != nil {
			if b.opt.Log != nil {
				b.opt.Log(err.Error())
			}
			return err
		}
		i = run[len(run)-1] + 1
	}
	return nil
}

// claimRun claims the chunks from i on, up to last, that the cache lacks
// and nobody fetches: in this process (a call in b.flight, which readers
// then wait for) and across processes (each chunk's byte lock, taken only
// if free). It stops at the first chunk it cannot claim.
func (b *Blob) claimRun(ctx context.Context, i, last int64) (run []int64, unlock func()) {
	var unlocks []func()
	unlock = func() {
		for _, u := range unlocks {
			u()
		}
	}
	for k := i; k <= last && len(run) < maxRunChunks; k++ {
		if f, err := b.openChunk(k); err == nil {
			f.Close()
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			break
		}
		b.mu.Lock()
		if _, busy := b.flight[k]; busy {
			b.mu.Unlock()
			break
		}
		b.flight[k] = &call{done: make(chan struct{})}
		b.mu.Unlock()
		u, err := b.lockByte(ctx, k, func() bool { return true })
		if err != nil || u == nil {
			b.mu.Lock()
			c := b.flight[k]
			delete(b.flight, k)
			c.err = errors.New("fetched by another process")
			close(c.done)
			b.mu.Unlock()
			break
		}
		unlocks = append(unlocks, u)
		run = append(run, k)
	}
	return run, unlock
}

// fetchRun fetches the consecutive chunks of run in one request (with
// retries) and writes each to the cache, checked against its digest where
// the cache has the blob's.
func (b *Blob) fetchRun(ctx context.Context, run []int64) error {
	ctx, cancel := context.WithTimeout(ctx, b.opt.Timeout)
	defer cancel()
	start, end := run[0]*ChunkSize, run[len(run)-1]*ChunkSize+b.chunkLen(run[len(run)-1])
	data, err := b.retry(ctx, func() ([]byte, error) { return b.get(ctx, start, end-start) })
	if err != nil {
		return b.explain(ctx, run[0], err)
	}
	b.mu.Lock()
	sums := b.sums
	b.mu.Unlock()
	for _, k := range run {
		c := data[k*ChunkSize-start : k*ChunkSize-start+b.chunkLen(k)]
		if sums != nil && sha256.Sum256(c) != sums[k] {
			return fmt.Errorf("blob %s of %s: chunk %d: the registry's bytes do not match their digest", b.dg, b.src, k)
		}
		if err := b.writeChunk(k, c); err != nil {
			return err
		}
	}
	return nil
}

// PrefetchRange brings the bytes [off, end) of r into the cache: r is a
// *Blob, an *Indexed or a *Verity over either (then the blob bytes of the index chunks that hold
// them), read by as few requests as FetchRange makes. Other readers go
// through as they are (a layout's file).
func PrefetchRange(ctx context.Context, r io.ReaderAt, off, end int64) error {
	switch r := r.(type) {
	case *Verity:
		return r.prefetchTarget(ctx, off, end)
	case *Blob:
		return r.FetchRange(ctx, off, end-off)
	case *Indexed:
		if end <= off {
			return nil
		}
		first, last := r.x.Find(uint64(off), uint64(end-off))
		if first >= last {
			return nil
		}
		a, z := r.x.Chunk(first), r.x.Chunk(last-1)
		return r.b.FetchRange(ctx, int64(a.BlockOffset), int64(z.BlockOffset+z.BlobLen-a.BlockOffset))
	}
	return nil
}
