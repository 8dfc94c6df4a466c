package lazy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// fetchWhole fetches the whole blob, decodes it into chunks aside, checks
// the blob's digest and only then puts the chunks, their digests and the
// size in the cache. Another process doing the same is waited for.
func (b *Blob) fetchWhole(ctx context.Context) error {
	done := func() bool { return b.readSize() >= 0 && b.sizedComplete() }
	unlock, err := b.lockByte(ctx, wholeLock, done)
	if err != nil {
		return b.explain(ctx, -1, err)
	}
	if unlock != nil {
		defer unlock()
		if !done() {
			_, err = b.retry(ctx, func() ([]byte, error) { return nil, b.decodeWhole(ctx) })
			if err != nil {
				return b.explain(ctx, -1, err)
			}
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.size < 0 {
		b.setSize(b.readSize())
	}
	return nil
}

// sizedComplete is complete for a blob whose size is on disk only.
func (b *Blob) sizedComplete() bool {
	if b.size >= 0 {
		return b.complete()
	}
	size := b.readSize()
	c := &Blob{dir: b.dir, size: size}
	return c.complete()
}

// decodeWhole is one try of fetchWhole's transfer.
func (b *Blob) decodeWhole(ctx context.Context) error {
	b.c.requests.Add(1)
	rc, err := b.src.Open(ctx, b.dg, 0, -1)
	if err != nil {
		return err
	}
	defer rc.Close()
	digest := sha256.New()
	counted := &countingReader{r: rc, c: b.c}
	dec, err := b.decode(io.TeeReader(counted, digest))
	if err != nil {
		return err
	}
	defer dec.Close()
	tmp, err := os.MkdirTemp(b.dir, ".whole-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var sums []byte
	var size int64
	buf := make([]byte, ChunkSize)
	for i := 0; ; i++ {
		n, err := io.ReadFull(dec, buf)
		if n > 0 {
			if werr := os.WriteFile(filepath.Join(tmp, "c"+strconv.Itoa(i)), buf[:n], 0o600); werr != nil {
				return werr
			}
			s := sha256.Sum256(buf[:n])
			sums = append(sums, s[:]...)
			size += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return err
		}
	}
	// The decoder may stop before the end of the stream: the digest is
	// of every byte.
	if _, err := io.Copy(io.Discard, io.TeeReader(counted, digest)); err != nil {
		return err
	}
	if err := checkDigest(b.dg, digest); err != nil {
		return fmt.Errorf("%w (fetched whole from %s)", err, b.src)
	}
	for i := range (size + ChunkSize - 1) / ChunkSize {
		n := min(ChunkSize, size-i*ChunkSize)
		if err := os.Rename(filepath.Join(tmp, "c"+strconv.FormatInt(i, 10)), b.chunkPath(i)); err != nil {
			return err
		}
		b.c.added(n)
	}
	if err := writeAtomic(filepath.Join(b.dir, "sums"), sums); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(b.dir, "size"), []byte(strconv.FormatInt(size, 10)+"\n"))
}

type countingReader struct {
	r io.Reader
	c *Cache
}

func (r *countingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.c.fetched.Add(int64(n))
	return n, err
}

// ErrDigest is the error of bytes that do not match their digest.
var ErrDigest = errors.New("digest mismatch")

func checkDigest(want v1.Hash, h hash.Hash) error {
	if want.Algorithm != "sha256" {
		return fmt.Errorf("blob %s: cannot check a %s digest", want, want.Algorithm)
	}
	if got := fmt.Sprintf("%x", h.Sum(nil)); got != want.Hex {
		return fmt.Errorf("blob %s: %w: its bytes are sha256:%s", want, ErrDigest, got)
	}
	return nil
}

func writeAtomic(p string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(p), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// Prefetch brings every chunk of the blob into the cache, one at a time and
// only while no read is waiting for a fetch, then checks the blob against
// its digest. On a match the per-chunk digests are kept, and every chunk
// is checked against them before use from then on, by every process of
// the cache; on a mismatch the blob's chunks go and every read of it fails.
func (b *Blob) Prefetch(ctx context.Context) error {
	if b.whole || b.Verified() {
		return nil
	}
	for i := range b.chunks() {
		for b.c.active.Load() > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := b.chunk(i, true)
		if err != nil {
			return err
		}
		f.Close()
	}
	return b.verify(ctx)
}

// verify hashes the cached chunks in order and compares the blob's digest.
func (b *Blob) verify(ctx context.Context) error {
	digest := sha256.New()
	n := b.chunks()
	sums := make([]byte, 0, n*sha256.Size)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := b.chunk(i, true)
		if err != nil {
			return err
		}
		h := sha256.New()
		_, err = io.Copy(io.MultiWriter(h, digest), io.NewSectionReader(f, 0, b.chunkLen(i)))
		f.Close()
		if err != nil {
			return err
		}
		sums = h.Sum(sums)
	}
	if err := checkDigest(b.dg, digest); err != nil {
		err = fmt.Errorf("%w (read by ranges from %s)", err, b.src)
		b.mu.Lock()
		b.bad = err
		b.mu.Unlock()
		for i := range n {
			os.Remove(b.chunkPath(i))
		}
		return err
	}
	if err := writeAtomic(filepath.Join(b.dir, "sums"), sums); err != nil {
		return err
	}
	b.mu.Lock()
	b.sums = make([][sha256.Size]byte, n)
	for i := range b.sums {
		copy(b.sums[i][:], sums[i*sha256.Size:])
		b.checked[i] = true
	}
	b.mu.Unlock()
	return nil
}
