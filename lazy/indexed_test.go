package lazy_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/lazy"
	"github.com/ocierofs/ocierofs/oci/chunkindex"
)

// TestIndexedZstd reads a +zstd layer blob with an embedded chunk index by
// ranges: the index is read without the blob; bytes the registry changes
// fail the read at their checksum instead of reaching the reader, and the
// chunk is fetched again on the next read.
func TestIndexedZstd(t *testing.T) {
	img := randomBytes(3<<20, 9)
	for i := range img {
		if i/4096%2 == 0 {
			img[i] = byte(i / 4096) // compressible halves
		}
	}
	f := newFaultyRegistry(t)
	ix, cache, blobLen := indexedBlob(t, f, img, 256<<10, lazy.Options{Retries: 1, Backoff: time.Millisecond})
	if ix.Size() != int64(len(img)) {
		t.Fatalf("size %d, want %d", ix.Size(), len(img))
	}
	if st := cache.Stats(); st.Bytes >= blobLen/2 {
		t.Errorf("reading the index fetched %d bytes of the blob's %d", st.Bytes, blobLen)
	}
	// The registry's bytes go wrong: the read fails at the checksum,
	// and reads again once the registry sends the right ones.
	f.corrupt.Store(true)
	p := make([]byte, 10000)
	_, err := ix.ReadAt(p, 1<<20-5000)
	var ce *chunkindex.CorruptError
	if !errors.As(err, &ce) {
		t.Errorf("chunks the registry changed: %v, want a checksum mismatch", err)
	}
	f.corrupt.Store(false)
	if _, err := ix.ReadAt(p, 1<<20-5000); err != nil || !bytes.Equal(p, img[1<<20-5000:1<<20+5000]) {
		t.Fatalf("read across two chunks: %v", err)
	}
}

// TestIndexedParallel: a read that spans several chunks of the index
// fetches them at once (EROFS image spec §3.4.4), a few at a time.
func TestIndexedParallel(t *testing.T) {
	img := randomBytes(4<<20, 3)
	f := newFaultyRegistry(t)
	ix, _, _ := indexedBlob(t, f, img, 512<<10, lazy.Options{})
	// Index chunks 1 to 5, of 512 KiB each, in the blob's cache chunks.
	f.delay.Store(int64(50 * time.Millisecond))
	f.maxInflight.Store(0)
	p := make([]byte, 2<<20)
	off := int64(1<<20 - 4096)
	if _, err := ix.ReadAt(p, off); err != nil || !bytes.Equal(p, img[off:off+int64(len(p))]) {
		t.Fatalf("read of 5 chunks: %v", err)
	}
	if m := f.maxInflight.Load(); m < 2 {
		t.Errorf("at most %d fetch at once for a read of 5 chunks, want several", m)
	}
}

// indexedBlob writes img as a +zstd layer blob with an embedded chunk
// index of chunk-byte chunks, pushes it to f, and opens it through its
// index with a fresh cache: the reader, the cache and the blob's size.
func indexedBlob(t *testing.T, f *faultyRegistry, img []byte, chunk int, opt lazy.Options) (*lazy.Indexed, *lazy.Cache, int64) {
	t.Helper()
	var blob bytes.Buffer
	w, err := chunkindex.NewWriter(&blob, chunkindex.WriterOptions{Compression: chunkindex.Zstd, ChunkSize: chunk})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(img)
	_, rng, err := w.Finish(true)
	if err != nil {
		t.Fatal(err)
	}
	dg := f.push(t, blob.Bytes(), "application/vnd.erofs+zstd")
	cache, err := lazy.OpenCache(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := cache.Ranged(f.source(t, 5*time.Second), dg, int64(blob.Len()), opt)
	if err != nil {
		t.Fatal(err)
	}
	x, err := chunkindex.Embedded(b, b.Size(), true, map[string]string{chunkindex.AnnotationRange: rng.String()})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := lazy.NewIndexed(b, x)
	if err != nil {
		t.Fatal(err)
	}
	return ix, cache, int64(blob.Len())
}
