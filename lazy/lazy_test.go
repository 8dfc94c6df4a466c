package lazy_test

import (
	"bytes"
	"context"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"

	"github.com/ocierofs/ocierofs/lazy"
	"github.com/ocierofs/ocierofs/oci"
)

// faultyRegistry is go-containerregistry's registry behind a handler that
// counts blob GETs and can stall them or flip their bytes.
type faultyRegistry struct {
	host    string
	repo    name.Repository
	gets    atomic.Int64
	stall   atomic.Bool
	corrupt atomic.Bool
	// delay holds each blob GET this long; inflight and maxInflight
	// count the GETs served at once.
	delay                 atomic.Int64
	inflight, maxInflight atomic.Int64
	released              chan struct{} // closed when the test ends: stalled requests go
}

func newFaultyRegistry(t *testing.T) *faultyRegistry {
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	f := &faultyRegistry{released: make(chan struct{})}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/sha256:") {
			f.gets.Add(1)
			n := f.inflight.Add(1)
			defer f.inflight.Add(-1)
			for m := f.maxInflight.Load(); n > m && !f.maxInflight.CompareAndSwap(m, n); m = f.maxInflight.Load() {
			}
			time.Sleep(time.Duration(f.delay.Load()))
			if f.stall.Load() {
				select {
				case <-r.Context().Done():
				case <-f.released:
				}
				return
			}
			if f.corrupt.Load() {
				rec := httptest.NewRecorder()
				reg.ServeHTTP(rec, r)
				body := rec.Body.Bytes()
				for i := range body {
					body[i] ^= 0xff
				}
				for k, v := range rec.Header() {
					w.Header()[k] = v
				}
				w.WriteHeader(rec.Code)
				w.Write(body)
				return
			}
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(func() { close(f.released); srv.Close() })
	u, _ := url.Parse(srv.URL)
	f.host = u.Host
	repo, err := name.NewRepository(f.host+"/test/lazy", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	f.repo = repo
	return f
}

// push uploads data as a layer blob of media type mt and returns its digest.
func (f *faultyRegistry) push(t *testing.T, data []byte, mt types.MediaType) v1.Hash {
	l := static.NewLayer(data, mt)
	if err := remote.WriteLayer(f.repo, l); err != nil {
		t.Fatal(err)
	}
	dg, _ := l.Digest()
	f.gets.Store(0)
	return dg
}

func (f *faultyRegistry) source(t *testing.T, stall time.Duration) lazy.Source {
	c, err := oci.Remote{StallTimeout: stall}.BlobClient(context.Background(), f.repo)
	if err != nil {
		t.Fatal(err)
	}
	return lazy.Registry(c, f.repo)
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestRangedFetchOnce: readers of one chunk, in this process and in
// another cache of the same directory (another process's view, with its
// own lock file description), fetch it once; every byte read is the
// blob's; the cache holds only what was read.
func TestRangedFetchOnce(t *testing.T) {
	f := newFaultyRegistry(t)
	data := randomBytes(3*lazy.ChunkSize+12345, 1)
	dg := f.push(t, data, "application/vnd.erofs.layer.v1")
	dir := t.TempDir()
	src := f.source(t, 0)
	var blobs []*lazy.Blob
	for range 2 {
		c, err := lazy.OpenCache(dir, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, err := c.Ranged(src, dg, int64(len(data)), lazy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		blobs = append(blobs, b)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := range 32 {
		wg.Go(func() {
			p := make([]byte, 4096)
			off := int64(lazy.ChunkSize + 100*g)
			if _, err := blobs[g%2].ReadAt(p, off); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(p, data[off:off+4096]) {
				errs <- io.ErrShortBuffer
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := f.gets.Load(); n != 1 {
		t.Fatalf("32 readers of one chunk made %d blob requests, want 1", n)
	}
	got := make([]byte, len(data))
	if n, err := blobs[0].ReadAt(got, 0); n != len(data) || (err != nil && err != io.EOF) {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the blob read back differs")
	}
	if n := f.gets.Load(); n != 4 {
		t.Fatalf("reading 4 chunks made %d requests, want 4", n)
	}
	if blobs[0].Verified() {
		t.Fatal("a blob read by ranges counts as verified before a whole pass")
	}
}

// TestPrefetchVerifies: after a prefetch the blob is verified; a chunk
// damaged on disk is fetched again, and bytes from the registry that do
// not match the digests are an error, never returned.
func TestPrefetchVerifies(t *testing.T) {
	f := newFaultyRegistry(t)
	data := randomBytes(2*lazy.ChunkSize+777, 2)
	dg := f.push(t, data, "application/vnd.erofs.layer.v1")
	dir := t.TempDir()
	src := f.source(t, 0)
	c, _ := lazy.OpenCache(dir, 0)
	b, err := c.Ranged(src, dg, int64(len(data)), lazy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Prefetch(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !b.Verified() {
		t.Fatal("not verified after a prefetch")
	}
	if st := c.Stats(); st.Bytes != int64(len(data)) {
		t.Fatalf("prefetch fetched %d bytes, want %d", st.Bytes, len(data))
	}
	chunk1 := filepath.Join(dir, "sha256", dg.Hex, "c1")
	raw, _ := os.ReadFile(chunk1)
	raw[10] ^= 1
	os.WriteFile(chunk1, raw, 0o600)

	// Another process: the damaged chunk is noticed and fetched again.
	c2, _ := lazy.OpenCache(dir, 0)
	b2, _ := c2.Ranged(src, dg, int64(len(data)), lazy.Options{Retries: -1})
	p := make([]byte, 100)
	if _, err := b2.ReadAt(p, lazy.ChunkSize); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, data[lazy.ChunkSize:lazy.ChunkSize+100]) {
		t.Fatal("damaged chunk served")
	}

	// Damaged on disk and in the registry: an error.
	raw, _ = os.ReadFile(chunk1)
	raw[10] ^= 1
	os.WriteFile(chunk1, raw, 0o600)
	f.corrupt.Store(true)
	c3, _ := lazy.OpenCache(dir, 0)
	b3, _ := c3.Ranged(src, dg, int64(len(data)), lazy.Options{Retries: -1})
	n, err := b3.ReadAt(p, lazy.ChunkSize)
	if err == nil || !strings.Contains(err.Error(), "do not match") {
		t.Fatalf("wrong bytes from the registry: read %d, error %v", n, err)
	}
}

// TestPrefetchDigestMismatch: a blob whose ranges do not add up to its
// digest fails every read once the prefetch saw it.
func TestPrefetchDigestMismatch(t *testing.T) {
	f := newFaultyRegistry(t)
	data := randomBytes(lazy.ChunkSize+5, 3)
	dg := f.push(t, data, "application/vnd.erofs.layer.v1")
	f.corrupt.Store(true)
	c, _ := lazy.OpenCache(t.TempDir(), 0)
	b, _ := c.Ranged(f.source(t, 0), dg, int64(len(data)), lazy.Options{})
	if err := b.Prefetch(context.Background()); err == nil || !strings.Contains(err.Error(), "digest mismatch") {
		t.Fatalf("prefetch of wrong bytes: %v", err)
	}
	if _, err := b.ReadAt(make([]byte, 10), 0); err == nil {
		t.Fatal("a read of a blob that failed its digest succeeded")
	}
}

// TestStallBounded: a registry that stops answering fails a read within
// the bound; once it answers again, reads succeed.
func TestStallBounded(t *testing.T) {
	f := newFaultyRegistry(t)
	data := randomBytes(lazy.ChunkSize*2, 4)
	dg := f.push(t, data, "application/vnd.erofs.layer.v1")
	c, _ := lazy.OpenCache(t.TempDir(), 0)
	b, _ := c.Ranged(f.source(t, 500*time.Millisecond), dg, int64(len(data)),
		lazy.Options{Timeout: 3 * time.Second, Backoff: 100 * time.Millisecond})
	f.stall.Store(true)
	start := time.Now()
	_, err := b.ReadAt(make([]byte, 10), 0)
	took := time.Since(start)
	if err == nil {
		t.Fatal("a read from a stalled registry succeeded")
	}
	if took > 6*time.Second {
		t.Fatalf("a stalled read took %s, bound 3s", took)
	}
	if f.gets.Load() < 2 {
		t.Fatalf("a stalled read was tried %d times, want retries", f.gets.Load())
	}
	t.Logf("stalled read failed after %s, %d tries: %v", took, f.gets.Load(), err)
	f.stall.Store(false)
	p := make([]byte, 10)
	if _, err := b.ReadAt(p, 0); err != nil || !bytes.Equal(p, data[:10]) {
		t.Fatalf("read after the stall: %v", err)
	}
}

// TestWholeZstd: a zstd blob is fetched whole, decoded, checked and then
// read from the cache without another request, also by another process.
func TestWholeZstd(t *testing.T) {
	f := newFaultyRegistry(t)
	data := bytes.Repeat(randomBytes(100000, 5), 20)
	var z bytes.Buffer
	zw, _ := zstd.NewWriter(&z)
	zw.Write(data)
	zw.Close()
	dg := f.push(t, z.Bytes(), "application/vnd.erofs.layer.v1+zstd")
	dir := t.TempDir()
	decode := func(r io.Reader) (io.ReadCloser, error) { return oci.Decompressor("zstd", r) }
	for i := range 2 {
		c, _ := lazy.OpenCache(dir, 0)
		b, err := c.Whole(context.Background(), f.source(t, 0), dg, decode, lazy.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if b.Size() != int64(len(data)) || !b.Verified() {
			t.Fatalf("size %d verified %v", b.Size(), b.Verified())
		}
		got, err := io.ReadAll(io.NewSectionReader(b, 0, b.Size()))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read %d bytes, %v", len(got), err)
		}
		if n := f.gets.Load(); n != 1 {
			t.Fatalf("open %d: %d blob requests, want 1", i, n)
		}
	}
	f.corrupt.Store(true)
	c, _ := lazy.OpenCache(t.TempDir(), 0)
	if _, err := c.Whole(context.Background(), f.source(t, 0), dg, decode, lazy.Options{Retries: -1}); err == nil {
		t.Fatal("a corrupt zstd blob was accepted")
	}
}

// TestEvict: a bounded cache stays under its bound and still reads right.
func TestEvict(t *testing.T) {
	f := newFaultyRegistry(t)
	data := randomBytes(8*lazy.ChunkSize, 6)
	dg := f.push(t, data, "application/vnd.erofs.layer.v1")
	dir := t.TempDir()
	c, _ := lazy.OpenCache(dir, 3*lazy.ChunkSize)
	b, _ := c.Ranged(f.source(t, 0), dg, int64(len(data)), lazy.Options{})
	got, err := io.ReadAll(io.NewSectionReader(b, 0, b.Size()))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		var total int64
		filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && strings.HasPrefix(fi.Name(), "c") && !fi.IsDir() {
				total += fi.Size()
			}
			return nil
		})
		if total <= 3*lazy.ChunkSize {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cache holds %d bytes, bound %d", total, 3*lazy.ChunkSize)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLayout: a layout's blob is read in place.
func TestLayout(t *testing.T) {
	dir := t.TempDir()
	data := randomBytes(1000, 7)
	l := static.NewLayer(data, "application/vnd.erofs.layer.v1")
	dg, _ := l.Digest()
	os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755)
	os.WriteFile(filepath.Join(dir, "blobs", "sha256", dg.Hex), data, 0o644)
	src := lazy.Layout(dir)
	p, ok := lazy.FilePath(src, dg)
	if !ok {
		t.Fatal("no file path for a layout")
	}
	got, _ := os.ReadFile(p)
	if !bytes.Equal(got, data) {
		t.Fatal("layout blob differs")
	}
	rc, err := src.Open(context.Background(), dg, 10, 20)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, _ = io.ReadAll(rc)
	if !bytes.Equal(got, data[10:30]) {
		t.Fatal("layout range differs")
	}
}

// TestReadAhead: reading a blob through fetches the chunks after the one
// read before they are asked for, and each chunk once.
func TestReadAhead(t *testing.T) {
	f := newFaultyRegistry(t)
	data := randomBytes(6*lazy.ChunkSize, 8)
	dg := f.push(t, data, "application/vnd.erofs.layer.v1")
	dir := t.TempDir()
	c, _ := lazy.OpenCache(dir, 0)
	b, _ := c.Ranged(f.source(t, 0), dg, int64(len(data)), lazy.Options{})
	p := make([]byte, 10)
	b.ReadAt(p, 0)
	b.ReadAt(p, lazy.ChunkSize)
	chunk := func(i int) string { return filepath.Join(dir, "sha256", dg.Hex, "c"+string(rune('0'+i))) }
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err2 := os.Stat(chunk(2))
		_, err3 := os.Stat(chunk(3))
		if err2 == nil && err3 == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("chunks 2 and 3 not read ahead of a sequential read")
		}
		time.Sleep(10 * time.Millisecond)
	}
	got, err := io.ReadAll(io.NewSectionReader(b, 0, b.Size()))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := f.gets.Load(); n != 6 {
		t.Fatalf("%d requests for 6 chunks", n)
	}
}
