package lazy

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"sync"
	"syscall"

	"github.com/ocierofs/ocierofs/convert/dmverity"
)

// Verity is the data of a layer checked against the dm-verity tree that
// follows it in the image data (the EROFS image spec's §3.5, convert
// --dmverity): every data block a read returns is hashed and checked, up
// the tree's path, against the root digest of the layer's annotation. The
// tree's blocks are read on demand, from the same reader, and kept once
// checked. A block that does not match is read once more (its cached
// bytes dropped, where they come from a Blob) and then fails the read
// with EIO: never wrong bytes.
type Verity struct {
	r    io.ReaderAt
	tree *dmverity.Tree
	root [sha256.Size]byte

	mu   sync.Mutex
	hash map[int64][]byte // checked hash blocks, by offset
}

// ErrVerity is the error of data that does not match its dm-verity tree.
var ErrVerity = fmt.Errorf("dm-verity: %w", syscall.EIO)

// NewVerity checks the data that r reads before hashOffset in blocks of
// blockSize bytes against the tree after it, whose root digest is root.
func NewVerity(r io.ReaderAt, hashOffset int64, blockSize int, root [sha256.Size]byte) (*Verity, error) {
	t, err := dmverity.NewTree(hashOffset, blockSize)
	if err != nil {
		return nil, err
	}
	return &Verity{r: r, tree: t, root: root, hash: map[int64][]byte{}}, nil
}

// Size is the size of the checked data: the tree's hash offset.
func (v *Verity) Size() int64 { return v.tree.HashOffset }

// Reader is what v checks.
func (v *Verity) Reader() io.ReaderAt { return v.r }

// ReadAt reads checked data.
func (v *Verity) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("dm-verity: negative offset %d", off)
	}
	size := v.tree.HashOffset
	if off >= size {
		return 0, io.EOF
	}
	want := min(int64(len(p)), size-off)
	bs := int64(v.tree.DataBlockSize)
	first, end := off/bs, (off+want+bs-1)/bs
	buf := make([]byte, (end-first)*bs)
	if err := v.readChecked(buf, first); err != nil {
		return 0, err
	}
	n := copy(p[:want], buf[off-first*bs:])
	if int64(n) < int64(len(p)) {
		return n, io.EOF
	}
	return n, nil
}

// readChecked reads the data blocks from first into buf and checks each;
// a block that fails is read again once, fresh from the source.
func (v *Verity) readChecked(buf []byte, first int64) error {
	bs := v.tree.DataBlockSize
	if _, err := v.r.ReadAt(buf, first*int64(bs)); err != nil && err != io.EOF {
		return err
	}
	for k := 0; k*bs < len(buf); k++ {
		blk := buf[k*bs : (k+1)*bs]
		d := uint64(first) + uint64(k)
		err := v.check(d, blk)
		if err == ErrVerity && v.refetch(int64(d)*int64(bs), int64(bs)) {
			if _, rerr := v.r.ReadAt(blk, int64(d)*int64(bs)); rerr != nil && rerr != io.EOF {
				return rerr
			}
			err = v.check(d, blk)
		}
		if err != nil {
			return fmt.Errorf("data block %d (bytes %d-%d): %w", d, int64(d)*int64(bs), int64(d+1)*int64(bs)-1, err)
		}
	}
	return nil
}

// refetch drops the cached bytes [off, off+n) of the blob under v, so
// that the next read fetches them again; false where there is no cache
// to drop.
func (v *Verity) refetch(off, n int64) bool {
	switch r := v.r.(type) {
	case *Blob:
		r.forget(off, n)
		return true
	case *Indexed:
		first, end := r.x.Find(uint64(off), uint64(n))
		r.mu.Lock()
		for i := first; i < end; i++ {
			delete(r.kept, i)
			for k, c := range r.lru {
				if c == i {
					r.lru = append(r.lru[:k], r.lru[k+1:]...)
					break
				}
			}
		}
		r.mu.Unlock()
		for i := first; i < end; i++ {
			c := r.x.Chunk(i)
			r.b.forget(int64(c.BlockOffset), int64(c.BlobLen))
		}
		return true
	}
	return false
}

// check checks data block d against the tree.
func (v *Verity) check(d uint64, blk []byte) error {
	levels := v.tree.Levels()
	want := v.root
	// k[i] is the block of level i-1 (of the data, for i = 0) whose
	// digest level i holds.
	k := make([]uint64, levels)
	for i, x := 0, d; i < levels; i, x = i+1, x/(dmverity.BlockSize/sha256.Size) {
		k[i] = x
	}
	for i := levels - 1; i >= 0; i-- {
		off, at := v.tree.HashBlock(i, k[i])
		hb, err := v.hashBlock(off, want)
		if err != nil {
			return err
		}
		copy(want[:], hb[at:at+sha256.Size])
	}
	if dmverity.Digest(blk) != want {
		return ErrVerity
	}
	return nil
}

// hashBlock is the hash block at off, checked against want (its digest
// in the level above, or the root digest) the first time it is read.
func (v *Verity) hashBlock(off int64, want [sha256.Size]byte) ([]byte, error) {
	v.mu.Lock()
	hb, ok := v.hash[off]
	v.mu.Unlock()
	if ok {
		return hb, nil
	}
	hb = make([]byte, dmverity.BlockSize)
	for try := 0; ; try++ {
		if _, err := v.r.ReadAt(hb, off); err != nil && err != io.EOF {
			return nil, err
		}
		if dmverity.Digest(hb) == want {
			break
		}
		if try > 0 || !v.refetch(off, int64(len(hb))) {
			return nil, fmt.Errorf("hash block at offset %d: %w", off, ErrVerity)
		}
	}
	v.mu.Lock()
	v.hash[off] = hb
	v.mu.Unlock()
	return hb, nil
}

// prefetchTarget is the reader under v, for PrefetchRange.
func (v *Verity) prefetchTarget(ctx context.Context, off, end int64) error {
	return PrefetchRange(ctx, v.r, off, end)
}
