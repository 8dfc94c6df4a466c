package lazy

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/ocierofs/ocierofs/oci/chunkindex"
)

// indexedKeep is how many decoded chunks an Indexed keeps: enough for the
// reads around one place (a file, a directory) to find their chunk
// decoded and checked.
const indexedKeep = 16

// Indexed is the image data of a layer read through its chunk index (the
// EROFS image spec's, oci/chunkindex) over a blob of the cache: a read
// fetches the blob bytes of the chunks it touches by range, checks each
// against its checksum in the index before use, and decompresses it (a
// +zstd layer). A compressed layer is then read by ranges too, and a
// raw one is checked chunk by chunk before any whole pass over it.
type Indexed struct {
	b *Blob
	x *chunkindex.Index
	r *chunkindex.Reader

	mu   sync.Mutex
	kept map[int][]byte
	lru  []int // chunk numbers, least recently used first
}

// NewIndexed reads the image data of b through x.
func NewIndexed(b *Blob, x *chunkindex.Index) (*Indexed, error) {
	r, err := chunkindex.NewReader(b, x)
	if err != nil {
		return nil, err
	}
	return &Indexed{b: b, x: x, r: r, kept: map[int][]byte{}}, nil
}

// Size is the image data's size.
func (ix *Indexed) Size() int64 { return int64(ix.x.UncompressedSize) }

// Blob is the blob read.
func (ix *Indexed) Blob() *Blob { return ix.b }

// ReadAt reads image data.
func (ix *Indexed) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("blob %s: negative offset %d", ix.b.dg, off)
	}
	first, end := ix.x.Find(uint64(off), uint64(len(p)))
	datas, errs := ix.chunks(first, end)
	n := 0
	for i := first; i < end; i++ {
		if err := errs[i-first]; err != nil {
			return n, fmt.Errorf("blob %s of %s: %w", ix.b.dg, ix.b.src, err)
		}
		n += copy(p[n:], datas[i-first][uint64(off)+uint64(n)-ix.x.UncompressedOffsets[i]:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// readParallel bounds the chunks of one read fetched at once: the EROFS
// image spec (§3.4.4) wants a read's chunks fetched concurrently, and a
// bound keeps one large read from taking every connection.
const readParallel = 4

// chunks are chunks [first, end) decoded and checked, fetched at once
// (readParallel at a time) where there are several.
func (ix *Indexed) chunks(first, end int) ([][]byte, []error) {
	datas, errs := make([][]byte, end-first), make([]error, end-first)
	if end-first == 1 {
		datas[0], errs[0] = ix.chunk(first)
		return datas, errs
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, readParallel)
	for i := first; i < end; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			datas[i-first], errs[i-first] = ix.chunk(i)
			<-sem
		}()
	}
	wg.Wait()
	return datas, errs
}

// chunk is chunk i decoded and checked, kept or read now.
func (ix *Indexed) chunk(i int) ([]byte, error) {
	ix.mu.Lock()
	if d, ok := ix.kept[i]; ok {
		ix.touch(i)
		ix.mu.Unlock()
		return d, nil
	}
	ix.mu.Unlock()
	d, err := ix.r.ReadChunk(i)
	if ce := (*chunkindex.CorruptError)(nil); errors.As(err, &ce) {
		// The cache may hold what a registry sent wrong (it checks a
		// chunk of its own only against a whole pass): the blob bytes
		// of the chunk are fetched again, once.
		c := ix.x.Chunk(i)
		ix.b.forget(int64(c.BlockOffset), int64(c.BlobLen))
		d, err = ix.r.ReadChunk(i)
	}
	if err != nil {
		return nil, err
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if _, ok := ix.kept[i]; !ok {
		ix.kept[i] = d
		ix.lru = append(ix.lru, i)
		if len(ix.lru) > indexedKeep {
			delete(ix.kept, ix.lru[0])
			ix.lru = ix.lru[1:]
		}
	}
	return d, nil
}

// touch moves chunk i to the end of the LRU list.
func (ix *Indexed) touch(i int) {
	for k, c := range ix.lru {
		if c == i {
			copy(ix.lru[k:], ix.lru[k+1:])
			ix.lru[len(ix.lru)-1] = i
			return
		}
	}
}

// forget drops the cached chunks that hold the blob's bytes [off, off+n),
// so that the next read fetches them again.
func (b *Blob) forget(off, n int64) {
	if n <= 0 || b.whole {
		return
	}
	for i := off / ChunkSize; i <= (off+n-1)/ChunkSize && i < b.chunks(); i++ {
		os.Remove(b.chunkPath(i))
		b.mu.Lock()
		b.checked[i] = false
		b.mu.Unlock()
	}
}
