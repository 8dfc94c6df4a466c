package convert

import (
	"bytes"
	"crypto/sha256"
	"io"
	"runtime"
	"testing"
	"testing/iotest"
	"time"
)

// TestReadAhead: what the consumer reads, a few bytes at a time, is the
// source, and the hash has every byte of it once the end is read, with or
// without a hash, for sizes around the chunk size.
func TestReadAhead(t *testing.T) {
	for _, n := range []int{0, 1, raChunkSize - 1, raChunkSize, 3*raChunkSize + 17, (raChunks + raHashChunks + 3) * raChunkSize} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i*31 + i>>11)
		}
		for _, hashed := range []bool{false, true} {
			h := sha256.New()
			var ra *readAhead
			if hashed {
				ra = newReadAhead(bytes.NewReader(src), h)
			} else {
				ra = newReadAhead(bytes.NewReader(src), nil)
			}
			var got bytes.Buffer
			buf := make([]byte, 1000)
			for {
				k, err := ra.Read(buf)
				got.Write(buf[:k])
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("%d bytes: %v", n, err)
				}
			}
			ra.Close()
			if !bytes.Equal(got.Bytes(), src) {
				t.Errorf("%d bytes, hash %v: read %d bytes, not the source", n, hashed, got.Len())
			}
			if want := sha256.Sum256(src); hashed && !bytes.Equal(h.Sum(nil), want[:]) {
				t.Errorf("%d bytes: hash %x, want %x", n, h.Sum(nil), want)
			}
		}
	}
}

// TestReadAheadClose: closing before the end stops both goroutines, even
// with every chunk full and nobody reading.
func TestReadAheadClose(t *testing.T) {
	before := runtime.NumGoroutine()
	src := make([]byte, 64*raChunkSize)
	for range 20 {
		ra := newReadAhead(bytes.NewReader(src), sha256.New())
		buf := make([]byte, 10)
		if _, err := ra.Read(buf); err != nil {
			t.Fatal(err)
		}
		ra.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		t.Errorf("%d goroutines after closing, %d before", n, before)
	}
}

// TestReadAheadSourceError: an io.ErrUnexpectedEOF of the source itself
// (a reader of a cut stream) reaches the consumer after the bytes before
// it; io.ReadFull's own, for a short last chunk, had made it an end.
func TestReadAheadSourceError(t *testing.T) {
	src := bytes.Repeat([]byte("x"), raChunkSize+100)
	r := io.MultiReader(bytes.NewReader(src), iotest.ErrReader(io.ErrUnexpectedEOF))
	ra := newReadAhead(r, nil)
	defer ra.Close()
	got, err := io.ReadAll(ra)
	if err != io.ErrUnexpectedEOF || !bytes.Equal(got, src) {
		t.Errorf("read %d of %d bytes, then %v; want io.ErrUnexpectedEOF", len(got), len(src), err)
	}
}
