package lazy

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Options bound the fetches of a blob.
type Options struct {
	// Timeout bounds one read: its fetch with every retry (default
	// DefaultTimeout). A read that cannot complete in it fails.
	Timeout time.Duration
	// Retries is how many times a fetch that failed for a cause a retry
	// may cure is tried again, after a backoff that doubles from Backoff
	// (defaults 4 and 250ms).
	Retries int
	Backoff time.Duration
	// Log, if set, receives a line for each fetch that failed.
	Log func(string)
}

// DefaultTimeout is Options.Timeout's default.
const DefaultTimeout = 30 * time.Second

func (o Options) withDefaults() Options {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Retries == 0 {
		o.Retries = 4
	}
	if o.Backoff <= 0 {
		o.Backoff = 250 * time.Millisecond
	}
	return o
}

// Blob is one blob of a Cache, read by offset (an io.ReaderAt): each read
// fetches the chunks it touches that the cache lacks. It is safe for
// concurrent use; a process has one Blob per digest, whatever the mounts
// that read it.
type Blob struct {
	c    *Cache
	src  Source
	dg   v1.Hash
	size int64
	dir  string
	opt  Options
	// whole blobs (compressed ones) are fetched and decompressed at once:
	// a missing chunk fetches them again.
	whole  bool
	decode func(io.Reader) (io.ReadCloser, error)

	lock *os.File // OFD byte locks: byte i for chunk i, wholeLock for the whole

	mu      sync.Mutex
	flight  map[int64]*call
	sums    [][sha256.Size]byte // per-chunk digests, nil when not known
	checked []bool              // chunk i was checked against sums since loaded
	touched []int64             // unix seconds of chunk i's last mtime refresh
	bad     error               // the blob failed its digest: every read fails
}

// call is a fetch in flight that other readers of the chunk wait for.
type call struct {
	done chan struct{}
	err  error
}

// wholeLock is the lock byte of a whole fetch, past every chunk's.
const wholeLock = 1 << 50

// Ranged returns the blob dg of size bytes from src, fetched chunk by chunk
// with range requests.
func (c *Cache) Ranged(src Source, dg v1.Hash, size int64, opt Options) (*Blob, error) {
	return c.blob(src, dg, size, false, nil, opt)
}

// Whole returns the blob dg from src whose bytes are decode's output over
// it (a compressed layer): it is fetched whole, decoded, checked against dg
// and cached, now unless the cache has it.
func (c *Cache) Whole(ctx context.Context, src Source, dg v1.Hash, decode func(io.Reader) (io.ReadCloser, error), opt Options) (*Blob, error) {
	b, err := c.blob(src, dg, -1, true, decode, opt)
	if err != nil {
		return nil, err
	}
	if b.size < 0 || !b.complete() {
		if err := b.fetchWhole(ctx); err != nil {
			return nil, err
		}
	}
	return b, nil
}

func (c *Cache) blob(src Source, dg v1.Hash, size int64, whole bool, decode func(io.Reader) (io.ReadCloser, error), opt Options) (*Blob, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.blobs[dg]; ok {
		return b, nil
	}
	dir := filepath.Join(c.dir, dg.Algorithm, dg.Hex)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	b := &Blob{c: c, src: src, dg: dg, size: size, dir: dir, opt: opt.withDefaults(), whole: whole, decode: decode,
		lock: lock, flight: map[int64]*call{}}
	if whole {
		b.size = b.readSize()
	}
	if b.size >= 0 {
		b.setSize(b.size)
	}
	c.blobs[dg] = b
	return b, nil
}

// setSize sizes the per-chunk state and loads the digests that a checked
// whole pass left.
func (b *Blob) setSize(size int64) {
	b.size = size
	n := b.chunks()
	b.checked = make([]bool, n)
	b.touched = make([]int64, n)
	raw, err := os.ReadFile(filepath.Join(b.dir, "sums"))
	if err == nil && len(raw) == int(n)*sha256.Size {
		b.sums = make([][sha256.Size]byte, n)
		for i := range b.sums {
			copy(b.sums[i][:], raw[i*sha256.Size:])
		}
	}
}

// readSize is the size a whole fetch recorded, or -1.
func (b *Blob) readSize() int64 {
	raw, err := os.ReadFile(filepath.Join(b.dir, "size"))
	if err != nil {
		return -1
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// Size is the size of the blob's bytes (decoded, for a whole blob).
func (b *Blob) Size() int64 { return b.size }

// Digest is the blob's digest.
func (b *Blob) Digest() v1.Hash { return b.dg }

// Verified reports whether the cache holds per-chunk digests of the blob,
// against which every chunk is checked before use.
func (b *Blob) Verified() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sums != nil
}

func (b *Blob) chunks() int64 { return (b.size + ChunkSize - 1) / ChunkSize }

// chunkLen is the length of chunk i.
func (b *Blob) chunkLen(i int64) int64 { return min(ChunkSize, b.size-i*ChunkSize) }

func (b *Blob) chunkPath(i int64) string { return filepath.Join(b.dir, "c"+strconv.FormatInt(i, 10)) }

// ReadAt reads the blob's bytes at off, fetching the chunks it lacks.
func (b *Blob) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("blob %s: negative offset", b.dg)
	}
	n := 0
	for n < len(p) {
		if off >= b.size {
			return n, io.EOF
		}
		i := off / ChunkSize
		f, err := b.chunk(i, false)
		if err != nil {
			return n, err
		}
		want := min(int64(len(p)-n), (i+1)*ChunkSize-off)
		m, err := f.ReadAt(p[n:n+int(want)], off-i*ChunkSize)
		f.Close()
		n += m
		off += int64(m)
		if err != nil && m < int(want) {
			return n, fmt.Errorf("blob %s: chunk %d: %w", b.dg, i, err)
		}
	}
	return n, nil
}

// chunk opens chunk i, fetching it first if the cache lacks it. bg marks a
// prefetch's fetch, which does not count as a foreground one.
func (b *Blob) chunk(i int64, bg bool) (*os.File, error) {
	b.mu.Lock()
	bad := b.bad
	b.mu.Unlock()
	if bad != nil {
		return nil, bad
	}
	if f, err := b.openChunk(i); err == nil {
		return f, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for try := 0; ; try++ {
		if err := b.fetch(i, bg); err != nil {
			return nil, err
		}
		if !bg && !b.whole && i > 0 && try == 0 {
			b.readAhead(i)
		}
		f, err := b.openChunk(i)
		// A concurrent reader may drop the chunk just fetched (its
		// bytes failed a checksum): fetch it again.
		if err == nil || !errors.Is(err, fs.ErrNotExist) || try >= 2 {
			return f, err
		}
	}
}

// readAhead starts fetching the chunks after i when the chunk before i is
// in the cache: a file read through, whose next chunk would otherwise cost
// a round trip of its own. A few run at once per cache, at most.
func (b *Blob) readAhead(i int64) {
	if _, err := os.Stat(b.chunkPath(i - 1)); err != nil {
		return
	}
	for j := i + 1; j <= i+readAheadChunks && j < b.chunks(); j++ {
		if _, err := os.Stat(b.chunkPath(j)); err == nil {
			continue
		}
		select {
		case b.c.ahead <- struct{}{}:
		default:
			return
		}
		go func() {
			defer func() { <-b.c.ahead }()
			b.fetch(j, true)
		}()
	}
}

// readAheadChunks is how far past a sequential read readAhead fetches.
const readAheadChunks = 2

// openChunk opens chunk i of the cache, checking it against its digest the
// first time this process reads it. A chunk of the wrong length (cut by a
// crash) or bytes counts as missing, and goes.
func (b *Blob) openChunk(i int64) (*os.File, error) {
	p := b.chunkPath(i)
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil || fi.Size() != b.chunkLen(i) {
		f.Close()
		os.Remove(p)
		return nil, fs.ErrNotExist
	}
	b.mu.Lock()
	check := b.sums != nil && !b.checked[i]
	var want [sha256.Size]byte
	if check {
		want = b.sums[i]
	}
	now := time.Now().Unix()
	touch := now-b.touched[i] > 60
	if touch {
		b.touched[i] = now
	}
	b.mu.Unlock()
	if touch {
		// The mtime is the eviction's notion of use.
		os.Chtimes(p, time.Time{}, time.Now())
	}
	if check {
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, fi.Size())); err != nil {
			f.Close()
			return nil, err
		}
		if [sha256.Size]byte(h.Sum(nil)) != want {
			f.Close()
			os.Remove(p)
			return nil, fs.ErrNotExist
		}
		b.mu.Lock()
		b.checked[i] = true
		b.mu.Unlock()
	}
	return f, nil
}

// complete reports whether every chunk is in the cache.
func (b *Blob) complete() bool {
	for i := range b.chunks() {
		if fi, err := os.Stat(b.chunkPath(i)); err != nil || fi.Size() != b.chunkLen(i) {
			return false
		}
	}
	return true
}

// fetch brings chunk i into the cache: one fetch per chunk at a time in
// this process (the others wait for it), and across processes (the byte
// lock); a whole blob is fetched whole.
func (b *Blob) fetch(i int64, bg bool) error {
	key := i
	if b.whole {
		key = -1
	}
	b.mu.Lock()
	if c, ok := b.flight[key]; ok {
		b.mu.Unlock()
		<-c.done
		return c.err
	}
	c := &call{done: make(chan struct{})}
	b.flight[key] = c
	b.mu.Unlock()
	if !bg {
		b.c.active.Add(1)
	}
	// A read waits Timeout at most; a whole fetch moves more bytes, and
	// the stall bound of each of its requests is what ends it.
	ctx, cancel := context.WithTimeout(context.Background(), b.opt.Timeout)
	if b.whole {
		cancel()
		ctx, cancel = context.WithCancel(context.Background())
	}
	if b.whole {
		c.err = b.fetchWhole(ctx)
	} else {
		c.err = b.fetchChunk(ctx, i)
	}
	cancel()
	if !bg {
		b.c.active.Add(-1)
	}
	if c.err != nil && b.opt.Log != nil {
		b.opt.Log(c.err.Error())
	}
	b.mu.Lock()
	delete(b.flight, key)
	b.mu.Unlock()
	close(c.done)
	return c.err
}

// fetchChunk fetches chunk i under its lock, unless another process
// fetched it meanwhile.
func (b *Blob) fetchChunk(ctx context.Context, i int64) error {
	unlock, err := b.lockByte(ctx, i, func() bool { _, err := os.Stat(b.chunkPath(i)); return err == nil })
	if err != nil || unlock == nil {
		return b.explain(ctx, i, err)
	}
	defer unlock()
	if f, err := b.openChunk(i); err == nil {
		f.Close()
		return nil
	}
	off, n := i*ChunkSize, b.chunkLen(i)
	data, err := b.retry(ctx, func() ([]byte, error) { return b.get(ctx, off, n) })
	if err != nil {
		return b.explain(ctx, i, err)
	}
	b.mu.Lock()
	sums := b.sums
	b.mu.Unlock()
	if sums != nil && sha256.Sum256(data) != sums[i] {
		return fmt.Errorf("blob %s of %s: chunk %d (bytes %d-%d): the registry's bytes do not match their digest", b.dg, b.src, i, off, off+n-1)
	}
	return b.writeChunk(i, data)
}

// explain says which bytes of which blob a failed fetch was for.
func (b *Blob) explain(ctx context.Context, i int64, err error) error {
	if err == nil {
		return nil
	}
	what := fmt.Sprintf("blob %s of %s: chunk %d", b.dg, b.src, i)
	if i < 0 {
		what = fmt.Sprintf("blob %s of %s", b.dg, b.src)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: no answer within %s: %w", what, b.opt.Timeout, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// get fetches n bytes at off, exactly.
func (b *Blob) get(ctx context.Context, off, n int64) ([]byte, error) {
	b.c.requests.Add(1)
	rc, err := b.src.Open(ctx, b.dg, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data := make([]byte, n)
	m, err := io.ReadFull(rc, data)
	b.c.fetched.Add(int64(m))
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return data, err
}

// retry runs fn until it succeeds, fails for good, or ctx ends, with a
// doubling backoff between tries.
func (b *Blob) retry(ctx context.Context, fn func() ([]byte, error)) ([]byte, error) {
	delay := b.opt.Backoff
	for try := 0; ; try++ {
		data, err := fn()
		if err == nil {
			return data, nil
		}
		if !transient(err) || try >= b.opt.Retries || ctx.Err() != nil {
			return nil, err
		}
		if b.opt.Log != nil {
			b.opt.Log(fmt.Sprintf("blob %s of %s: %v (trying again in %s)", b.dg, b.src, err, delay))
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
		delay *= 2
	}
}

// writeChunk puts chunk i in the cache: written aside, then renamed, so
// that no reader sees part of it.
func (b *Blob) writeChunk(i int64, data []byte) error {
	f, err := os.CreateTemp(b.dir, ".c"+strconv.FormatInt(i, 10)+"-*")
	if err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), b.chunkPath(i))
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("cache: %w", err)
	}
	b.c.added(int64(len(data)))
	return nil
}
