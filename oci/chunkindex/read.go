package chunkindex

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// MaxPayload bounds the index a reader loads: far above any real one (the
// index of a 1 TiB layer in 512 KiB chunks with SHA-512 checksums fits in
// it), so that a crafted range cannot make a reader allocate without end.
const MaxPayload = 256 << 20

// MaxChunk bounds the image data of one chunk a Reader reads: it holds a
// chunk in memory, and a crafted index could declare any length.
const MaxChunk = 256 << 20

// Skippable frames: the magic's range, and the frame header's size.
const (
	skippableMagicLo = 0x184D2A50
	skippableMagicHi = 0x184D2A5F
	frameHeaderSize  = 8
)

// Range is the value of AnnotationRange: the index's section of the blob,
// [Offset, End).
type Range struct{ Offset, End int64 }

func (r Range) String() string { return fmt.Sprintf("%d:%d", r.Offset, r.End) }

// ParseRange reads an AnnotationRange value (offset [":" end]) of a blob
// of blobSize bytes; a missing end is the blob's end.
func ParseRange(s string, blobSize int64) (Range, error) {
	off, end, hasEnd := strings.Cut(s, ":")
	r := Range{End: blobSize}
	var err error
	if r.Offset, err = parseUint(off); err != nil {
		return r, fmt.Errorf("%s %q: offset: %w", AnnotationRange, s, err)
	}
	if hasEnd {
		if r.End, err = parseUint(end); err != nil {
			return r, fmt.Errorf("%s %q: end: %w", AnnotationRange, s, err)
		}
	}
	if r.Offset > r.End || r.End > blobSize {
		return r, fmt.Errorf("%s %q: not a range of the blob's %d bytes", AnnotationRange, s, blobSize)
	}
	return r, nil
}

// parseUint reads 1*DIGIT, as the annotation grammar has it (no sign, no
// spaces).
func parseUint(s string) (int64, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a decimal number", s)
	}
	return strconv.ParseInt(s, 10, 64)
}

// Digest is the value of AnnotationDigest for an index's payload.
func Digest(payload []byte) string {
	s := sha256.Sum256(payload)
	return "sha256:" + hex.EncodeToString(s[:])
}

// checkDigest compares payload with a digest annotation (sha256 or
// sha512); an empty one is not checked.
func checkDigest(payload []byte, want string) error {
	if want == "" {
		return nil
	}
	alg, hexs, _ := strings.Cut(want, ":")
	var got []byte
	switch alg {
	case "sha256":
		s := sha256.Sum256(payload)
		got = s[:]
	case "sha512":
		s := sha512.Sum512(payload)
		got = s[:]
	default:
		return unreadable("%s %q: digest algorithm %q", AnnotationDigest, want, alg)
	}
	if hex.EncodeToString(got) != hexs {
		return corrupt(-1, "the index's bytes are %s:%x, %s says %s", alg, got, AnnotationDigest, want)
	}
	return nil
}

// checkMediaType refuses an index whose AnnotationMediaType is not this
// package's (§2.2: parse no index of a media type one does not implement).
func checkMediaType(ann map[string]string) error {
	if mt, ok := ann[AnnotationMediaType]; ok && mt != MediaType {
		return unreadable("%s %q", AnnotationMediaType, mt)
	}
	return nil
}

// Embedded reads the index embedded in a layer blob, as its descriptor's
// annotations locate it: the payload's digest checked (if annotated), the
// skippable frame of a zstd layer unwrapped, CompressionType matched with
// the layer's (zstd: application/vnd.erofs+zstd). It returns nil, nil
// for a layer without AnnotationRange.
func Embedded(blob io.ReaderAt, blobSize int64, zstdLayer bool, ann map[string]string) (*Index, error) {
	rs, ok := ann[AnnotationRange]
	if !ok {
		return nil, nil
	}
	if err := checkMediaType(ann); err != nil {
		return nil, err
	}
	r, err := ParseRange(rs, blobSize)
	if err != nil {
		return nil, err
	}
	if r.End-r.Offset > MaxPayload+frameHeaderSize {
		return nil, corrupt(r.Offset, "a section of %d bytes, more than an index may have (%d)", r.End-r.Offset, MaxPayload)
	}
	sec := make([]byte, r.End-r.Offset)
	if _, err := blob.ReadAt(sec, r.Offset); err != nil {
		return nil, fmt.Errorf("chunk index: read %d bytes at %d: %w", len(sec), r.Offset, err)
	}
	payload := sec
	if zstdLayer {
		if len(sec) < frameHeaderSize {
			return nil, corrupt(r.Offset, "%d bytes, too few for a skippable frame", len(sec))
		}
		m, size := binary.LittleEndian.Uint32(sec), binary.LittleEndian.Uint32(sec[4:])
		if m < skippableMagicLo || m > skippableMagicHi {
			return nil, corrupt(r.Offset, "magic %#x is no skippable frame's", m)
		}
		if int64(size) != int64(len(sec))-frameHeaderSize {
			return nil, corrupt(r.Offset, "a skippable frame of %d bytes in a section of %d", size, len(sec)-frameHeaderSize)
		}
		payload = sec[frameHeaderSize:]
	}
	if err := checkDigest(payload, ann[AnnotationDigest]); err != nil {
		return nil, err
	}
	x, err := Parse(payload)
	if err != nil {
		return nil, err
	}
	if err := x.matchLayer(zstdLayer); err != nil {
		return nil, err
	}
	x.DataEnd = uint64(r.Offset)
	return x, x.fits(uint64(r.Offset))
}

// Standalone reads a standalone chunk-index layer's payload, the index of
// the layer before it (target: its digest; targetSize: its size). ann are
// the standalone layer's annotations: AnnotationTarget must name target
// where it is given (§3.4.3).
func Standalone(payload []byte, ann map[string]string, target string, targetSize int64, zstdLayer bool) (*Index, error) {
	if t, ok := ann[AnnotationTarget]; ok && t != target {
		return nil, corrupt(-1, "%s %s, but the layer before it is %s", AnnotationTarget, t, target)
	}
	if err := checkMediaType(ann); err != nil {
		return nil, err
	}
	if err := checkDigest(payload, ann[AnnotationDigest]); err != nil {
		return nil, err
	}
	x, err := Parse(payload)
	if err != nil {
		return nil, err
	}
	if err := x.matchLayer(zstdLayer); err != nil {
		return nil, err
	}
	x.DataEnd = uint64(targetSize)
	return x, x.fits(uint64(targetSize))
}

// matchLayer checks CompressionType against the layer's media type (§3.4.1).
func (x *Index) matchLayer(zstdLayer bool) error {
	want := None
	if zstdLayer {
		want = Zstd
	}
	if x.Compression != want {
		return corrupt(5, "CompressionType %s in a layer whose media type says %s", x.Compression, want)
	}
	return nil
}

// fits checks that every chunk lies in the blob's first end bytes.
func (x *Index) fits(end uint64) error {
	for i := range x.Len() {
		c := x.Chunk(i)
		if c.BlockOffset > end || c.BlobLen > end-c.BlockOffset || c.BlobLen == 0 {
			return corrupt(int64(HeaderSize+i*x.entrySize()), "chunk %d, %d bytes at blob offset %d, is not in the blob's %d bytes of data", i, c.BlobLen, c.BlockOffset, end)
		}
	}
	return nil
}

// VerifyChunk checks chunk i's bytes as the blob stores them against its
// checksum; an index without checksums verifies nothing.
func (x *Index) VerifyChunk(i int, blobBytes []byte) error {
	want := x.Checksum(i)
	if want == nil {
		return nil
	}
	var got []byte
	if x.HashSize == sha512.Size {
		s := sha512.Sum512(blobBytes)
		got = s[:]
	} else {
		s := sha256.Sum256(blobBytes)
		got = s[:]
	}
	if !bytes.Equal(got, want) {
		c := x.Chunk(i)
		return corrupt(int64(c.BlockOffset), "chunk %d (%d blob bytes) does not match its checksum %x", i, len(blobBytes), want)
	}
	return nil
}

// Reader reads the image data of a layer through its index (§3.4.4):
// each chunk a read touches is fetched from the blob, checked against its
// checksum, and decompressed. It keeps no chunk: a cache goes below it (a
// lazy blob) or above it.
type Reader struct {
	x    *Index
	blob io.ReaderAt
	dec  *zstd.Decoder
	mu   sync.Mutex // dec is not safe for concurrent DecodeAll
}

// NewReader reads blob through x.
func NewReader(blob io.ReaderAt, x *Index) (*Reader, error) {
	r := &Reader{x: x, blob: blob}
	if x.Compression == Zstd {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxChunk))
		if err != nil {
			return nil, err
		}
		r.dec = d
	}
	return r, nil
}

// Size is the image data's size.
func (r *Reader) Size() int64 { return int64(r.x.UncompressedSize) }

// ReadChunk returns chunk i's image data, checked.
func (r *Reader) ReadChunk(i int) ([]byte, error) {
	c := r.x.Chunk(i)
	if c.Len > MaxChunk || c.BlobLen > MaxChunk+frameHeaderSize+4 {
		return nil, fmt.Errorf("chunk %d: %d bytes (%d in the blob), more than a reader takes (%d)", i, c.Len, c.BlobLen, MaxChunk)
	}
	raw := make([]byte, c.BlobLen)
	if _, err := r.blob.ReadAt(raw, int64(c.BlockOffset)); err != nil {
		return nil, fmt.Errorf("chunk %d: read %d bytes at blob offset %d: %w", i, c.BlobLen, c.BlockOffset, err)
	}
	if err := r.x.VerifyChunk(i, raw); err != nil {
		return nil, err
	}
	if r.dec == nil {
		return raw, nil
	}
	// A frame that says its size says it first: one that is not the
	// chunk's is refused before it is decoded.
	var h zstd.Header
	if err := h.Decode(raw); err != nil {
		return nil, corrupt(int64(c.BlockOffset), "chunk %d: zstd frame header: %v", i, err)
	}
	if h.HasFCS && h.FrameContentSize != c.Len || h.WindowSize > MaxChunk {
		return nil, corrupt(int64(c.BlockOffset), "chunk %d: a zstd frame of %d bytes (window %d), not of the chunk's %d", i, h.FrameContentSize, h.WindowSize, c.Len)
	}
	r.mu.Lock()
	data, err := r.dec.DecodeAll(raw, make([]byte, 0, c.Len))
	r.mu.Unlock()
	if err != nil {
		return nil, corrupt(int64(c.BlockOffset), "chunk %d: zstd: %v", i, err)
	}
	if uint64(len(data)) != c.Len {
		return nil, corrupt(int64(c.BlockOffset), "chunk %d decompresses to %d bytes, not its %d", i, len(data), c.Len)
	}
	return data, nil
}

// ReadAt reads image data at off, chunk by chunk.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("chunk index: negative offset %d", off)
	}
	first, end := r.x.Find(uint64(off), uint64(len(p)))
	n := 0
	for i := first; i < end; i++ {
		data, err := r.ReadChunk(i)
		if err != nil {
			return n, err
		}
		n += copy(p[n:], data[uint64(off)+uint64(n)-r.x.UncompressedOffsets[i]:])
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}
