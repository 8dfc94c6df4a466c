package chunkindex

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// data is n bytes, half of them compressible.
func data(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		if i/1000%2 == 0 {
			b[i] = byte(r.Uint32())
		} else {
			b[i] = byte(i / 1000)
		}
	}
	return b
}

// build writes img into a blob with an embedded (or no) index.
func build(t testing.TB, img []byte, opt WriterOptions, embed bool) ([]byte, *Index, Range) {
	t.Helper()
	var blob bytes.Buffer
	w, err := NewWriter(&blob, opt)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(img); err != nil {
		t.Fatal(err)
	}
	x, r, err := w.Finish(embed)
	if err != nil {
		t.Fatal(err)
	}
	return blob.Bytes(), x, r
}

// TestEmbeddedRoundTrip writes raw and zstd blobs with embedded indexes,
// finds each index through its annotations, and reads every kind of range
// back through it.
func TestEmbeddedRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		opt  WriterOptions
	}{
		{"raw", 5*4096 + 100, WriterOptions{ChunkSize: 4096}},
		{"raw-aligned", 4 * 8192, WriterOptions{ChunkSize: 8192}},
		{"zstd", 7*4096 + 3, WriterOptions{ChunkSize: 4096, Compression: Zstd}},
		{"zstd-nosum", 3 * 4096, WriterOptions{ChunkSize: 4096, Compression: Zstd, NoChecksums: true}},
		{"zstd-one", 100, WriterOptions{Compression: Zstd}},
		{"empty", 0, WriterOptions{Compression: Zstd}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := data(tc.size, 7)
			blob, x, r := build(t, img, tc.opt, true)
			if r.End != int64(len(blob)) {
				t.Fatalf("range %v, blob of %d bytes", r, len(blob))
			}
			z := tc.opt.Compression == Zstd
			if z && r.Offset%4 != 0 {
				t.Errorf("the index's frame starts at %d, not 4-byte aligned", r.Offset)
			}
			payload, _ := x.MarshalBinary()
			ann := map[string]string{AnnotationRange: r.String(), AnnotationDigest: Digest(payload)}
			got, err := Embedded(bytes.NewReader(blob), int64(len(blob)), z, ann)
			if err != nil {
				t.Fatal(err)
			}
			if got.Len() != x.Len() || got.UncompressedSize != uint64(len(img)) || got.DataEnd != uint64(r.Offset) {
				t.Fatalf("read back %d chunks of %d bytes to %d; wrote %d of %d", got.Len(), got.UncompressedSize, got.DataEnd, x.Len(), len(img))
			}
			if z {
				// A standard decoder reads the whole blob as the image.
				d, _ := zstd.NewReader(bytes.NewReader(blob))
				all, err := io.ReadAll(d)
				d.Close()
				if err != nil || !bytes.Equal(all, img) {
					t.Fatalf("the blob through a zstd decoder: %d bytes, %v", len(all), err)
				}
			} else if !bytes.Equal(blob[:len(img)], img) {
				t.Fatal("a raw blob does not start with the image")
			}
			rd, err := NewReader(bytes.NewReader(blob), got)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range [][2]int{{0, len(img)}, {0, 1}, {4095, 2}, {4096, 4096}, {len(img) - 1, 1}, {100, 3 * 4096}, {len(img) - 10, 20}} {
				off, n := max(0, min(c[0], len(img))), c[1]
				p := make([]byte, n)
				m, err := rd.ReadAt(p, int64(off))
				want := img[off:min(off+n, len(img))]
				if m != len(want) || !bytes.Equal(p[:m], want) || (m < n) != (err == io.EOF) {
					t.Errorf("ReadAt(%d, %d): %d bytes, %v", off, n, m, err)
				}
			}
		})
	}
}

// TestStandalone reads a standalone index, and refuses one whose target is
// not the layer before it.
func TestStandalone(t *testing.T) {
	img := data(3*4096+5, 3)
	blob, x, _ := build(t, img, WriterOptions{ChunkSize: 4096, Compression: Zstd}, false)
	payload, err := x.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	ann := map[string]string{AnnotationTarget: "sha256:aa"}
	got, err := Standalone(payload, ann, "sha256:aa", int64(len(blob)), true)
	if err != nil {
		t.Fatal(err)
	}
	rd, _ := NewReader(bytes.NewReader(blob), got)
	p := make([]byte, len(img))
	if _, err := rd.ReadAt(p, 0); err != nil || !bytes.Equal(p, img) {
		t.Fatalf("read through a standalone index: %v", err)
	}
	if _, err := Standalone(payload, ann, "sha256:bb", int64(len(blob)), true); err == nil {
		t.Error("a target that is not the layer before: no error")
	}
	if _, err := Standalone(payload, nil, "sha256:bb", int64(len(blob)), false); err == nil {
		t.Error("a zstd index for a raw layer: no error")
	}
}

// TestCorruptChunk: a changed byte of a chunk fails the read of that chunk
// with a CorruptError naming it, and the others still read.
func TestCorruptChunk(t *testing.T) {
	for _, comp := range []Compression{None, Zstd} {
		img := data(4*4096, 5)
		blob, x, r := build(t, img, WriterOptions{ChunkSize: 4096, Compression: comp}, true)
		c := x.Chunk(2)
		blob[c.BlockOffset+c.BlobLen/2] ^= 1
		got, err := Embedded(bytes.NewReader(blob), int64(len(blob)), comp == Zstd, map[string]string{AnnotationRange: r.String()})
		if err != nil {
			t.Fatal(err)
		}
		rd, _ := NewReader(bytes.NewReader(blob), got)
		p := make([]byte, 10)
		var ce *CorruptError
		if _, err := rd.ReadAt(p, 2*4096+7); !errors.As(err, &ce) || ce.Offset != int64(c.BlockOffset) {
			t.Errorf("%s: read of a changed chunk: %v", comp, err)
		}
		if _, err := rd.ReadAt(p, 0); err != nil {
			t.Errorf("%s: read of an intact chunk: %v", comp, err)
		}
	}
}

// TestParseRefuses: each header fault the spec names is an error of its
// kind (§3.4.6).
func TestParseRefuses(t *testing.T) {
	_, x, _ := build(t, data(2*4096, 1), WriterOptions{ChunkSize: 4096}, false)
	good, _ := x.MarshalBinary()
	if _, err := Parse(good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		at         int
		val        byte
		unreadable bool
	}{
		{"magic", 0, 0, false},
		{"version", 4, 2, true},
		{"compression", 5, 2, true},
		{"flags", 6, 1, true},
		{"reserved", 25, 1, false},
		{"hash algo", 20, 2, true},
		{"hash size", 21, 48, true},
		{"num chunks", 16, 3, false},
		{"first offset", HeaderSize + 8, 1, false},
	} {
		b := bytes.Clone(good)
		b[tc.at] = tc.val
		_, err := Parse(b)
		var ce *CorruptError
		switch {
		case err == nil:
			t.Errorf("%s: no error", tc.name)
		case tc.unreadable != errors.Is(err, ErrUnreadable):
			t.Errorf("%s: %v, want unreadable %v", tc.name, err, tc.unreadable)
		case !tc.unreadable && !errors.As(err, &ce):
			t.Errorf("%s: %v is no CorruptError", tc.name, err)
		}
	}
	if _, err := Parse(good[:len(good)-1]); err == nil {
		t.Error("a truncated index: no error")
	}
	if _, err := Embedded(bytes.NewReader(good), int64(len(good)), false, map[string]string{AnnotationRange: "0", AnnotationMediaType: "application/x"}); !errors.Is(err, ErrUnreadable) {
		t.Errorf("an unknown chunk-index media type: %v", err)
	}
	for _, s := range []string{"", "x", "-1", "5:3", "0:99999", "+1", "1:"} {
		if _, err := ParseRange(s, 100); err == nil {
			t.Errorf("range %q: no error", s)
		}
	}
	if r, err := ParseRange("40", 100); err != nil || r != (Range{40, 100}) {
		t.Errorf("range without end: %v %v", r, err)
	}
}

// TestDeterministic: the same data and options make the same bytes.
func TestDeterministic(t *testing.T) {
	img := data(6*4096+9, 11)
	a, _, _ := build(t, img, WriterOptions{ChunkSize: 4096, Compression: Zstd}, true)
	b, _, _ := build(t, img, WriterOptions{ChunkSize: 4096, Compression: Zstd}, true)
	if !bytes.Equal(a, b) {
		t.Fatal("two writes of the same data differ")
	}
}

// FuzzParse: any bytes parse to an index that reads safely, or to an error.
func FuzzParse(f *testing.F) {
	for _, comp := range []Compression{None, Zstd} {
		_, x, _ := build(f, data(3*4096+1, 2), WriterOptions{ChunkSize: 4096, Compression: comp}, false)
		b, _ := x.MarshalBinary()
		f.Add(b)
	}
	f.Add(make([]byte, HeaderSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := Parse(b)
		if err != nil {
			return
		}
		x.DataEnd = 1 << 20
		again, err := x.MarshalBinary()
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("a parsed index encodes to other bytes: %v", err)
		}
		if x.fits(x.DataEnd) != nil {
			return
		}
		rd, _ := NewReader(bytes.NewReader(make([]byte, 1<<20)), x)
		p := make([]byte, 64)
		rd.ReadAt(p, int64(x.UncompressedSize/2))
		x.Find(0, ^uint64(0))
	})
}

// FuzzEmbedded: any blob and range annotation give an index or an error.
func FuzzEmbedded(f *testing.F) {
	blob, _, r := build(f, data(300, 4), WriterOptions{ChunkSize: 4096, Compression: Zstd}, true)
	f.Add(blob, r.String(), true)
	blob, _, r = build(f, data(300, 4), WriterOptions{ChunkSize: 4096}, true)
	f.Add(blob, r.String(), false)
	f.Fuzz(func(t *testing.T, blob []byte, rs string, z bool) {
		x, err := Embedded(bytes.NewReader(blob), int64(len(blob)), z, map[string]string{AnnotationRange: rs})
		if err != nil {
			return
		}
		rd, err := NewReader(bytes.NewReader(blob), x)
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 100)
		rd.ReadAt(p, 0)
	})
}
