// Package chunkindex is the chunk index of the EROFS image layer
// specification (§3.4, media type application/vnd.erofs.chunk-index.v1): a
// small binary table that maps fixed chunks of a layer's image data to
// their bytes in the layer blob, each with a checksum, so that a byte range
// of the image can be read, and checked, without the rest of the blob.
//
//	idx, _ := chunkindex.Embedded(blob, size, true, desc.Annotations) // a +zstd layer
//	r, _ := chunkindex.NewReader(blob, idx)
//	n, _ := r.ReadAt(p, off)   // fetches, checks and decompresses the chunks it needs
//
// A Writer makes the blob's data part (raw, or one zstd frame per chunk)
// and the index over it, embedded after the data or for a standalone layer.
//
// The package knows blobs and bytes only: not EROFS, not registries.
package chunkindex

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
)

// MediaType is the chunk index's media type: of a standalone layer, and
// the default of AnnotationMediaType.
const MediaType = "application/vnd.erofs.chunk-index.v1"

// The layer descriptor annotations of §2.3.
const (
	AnnotationRange     = "org.erofs.chunk-index.range"
	AnnotationDigest    = "org.erofs.chunk-index.digest"
	AnnotationMediaType = "org.erofs.chunk-index.mediaType"
	AnnotationTarget    = "org.erofs.chunk-index.target"
)

// HeaderSize is the size of the index's header; entries follow it.
const HeaderSize = 32

// DefaultChunkSize is the chunk size a Writer uses unless told: the lazy
// package's fetch unit, so that a raw layer's chunks are the chunks a lazy
// reader fetches.
const DefaultChunkSize = 512 << 10

var magic = [4]byte{0xCD, 0xE4, 0xEC, 0x67}

// Compression is the header's CompressionType: how a chunk's bytes are
// stored in the blob.
type Compression uint8

const (
	// None: a chunk is its bytes as they are (raw application/vnd.erofs).
	None Compression = 0
	// Zstd: a chunk is one zstd frame (application/vnd.erofs+zstd).
	Zstd Compression = 1
)

func (c Compression) String() string {
	switch c {
	case None:
		return "none"
	case Zstd:
		return "zstd"
	}
	return fmt.Sprintf("compression %d", uint8(c))
}

// HashAlgo is the header's hash family of the per-chunk checksums.
type HashAlgo uint8

const (
	HashNone HashAlgo = 0
	HashSHA2 HashAlgo = 1
)

// ErrUnreadable is wrapped by the errors of an index this package does not
// read (an unknown CompressionType, Flags bit, hash family or media type):
// the spec has the consumer fall back to sequential reads, not fail.
var ErrUnreadable = errors.New("chunk index unreadable")

// CorruptError is an index, or a chunk, that is not what it must be: the
// layer is corrupt (§3.4.2, §3.4.6).
type CorruptError struct {
	// Offset is where in the index, or the blob, the fault is; -1 if
	// nowhere in particular.
	Offset int64
	Msg    string
}

func (e *CorruptError) Error() string {
	if e.Offset < 0 {
		return "chunk index: " + e.Msg
	}
	return fmt.Sprintf("chunk index: offset %d: %s", e.Offset, e.Msg)
}

func corrupt(off int64, format string, args ...any) error {
	return &CorruptError{Offset: off, Msg: fmt.Sprintf(format, args...)}
}

func unreadable(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnreadable, fmt.Sprintf(format, args...))
}

// Index is a parsed chunk index.
type Index struct {
	Compression      Compression
	UncompressedSize uint64
	HashAlgo         HashAlgo
	HashSize         int
	// BlockOffsets and UncompressedOffsets are the entries' fields;
	// Checksums the entries' checksums, HashSize bytes each, end to end.
	BlockOffsets        []uint64
	UncompressedOffsets []uint64
	Checksums           []byte
	// DataEnd is where the last zstd chunk ends in the blob: the offset
	// of the embedded index's section (chunkIndexStart), or, for a
	// standalone index, the size of the layer it indexes. Unused for
	// Compression None.
	DataEnd uint64
}

// Len is the number of chunks.
func (x *Index) Len() int { return len(x.UncompressedOffsets) }

func (x *Index) entrySize() int { return 16 + x.HashSize }

// PayloadSize is the size of the index's bytes: header and entries.
func (x *Index) PayloadSize() int64 { return HeaderSize + int64(x.Len())*int64(x.entrySize()) }

// Checksum is chunk i's checksum (nil without checksums).
func (x *Index) Checksum(i int) []byte {
	if x.HashSize == 0 {
		return nil
	}
	return x.Checksums[i*x.HashSize : (i+1)*x.HashSize]
}

// Chunk is where chunk i is: its bytes in the blob ([BlockOffset,
// BlockOffset+BlobLen)) and in the image data.
type Chunk struct {
	Index              int
	BlockOffset        uint64
	BlobLen            uint64
	UncompressedOffset uint64
	Len                uint64
}

// Chunk returns chunk i's place (§3.4.2).
func (x *Index) Chunk(i int) Chunk {
	c := Chunk{Index: i, BlockOffset: x.BlockOffsets[i], UncompressedOffset: x.UncompressedOffsets[i]}
	if i+1 < x.Len() {
		c.Len = x.UncompressedOffsets[i+1] - c.UncompressedOffset
	} else {
		c.Len = x.UncompressedSize - c.UncompressedOffset
	}
	switch {
	case x.Compression == None:
		c.BlobLen = c.Len
	case i+1 < x.Len():
		c.BlobLen = x.BlockOffsets[i+1] - c.BlockOffset
	case x.DataEnd >= c.BlockOffset:
		c.BlobLen = x.DataEnd - c.BlockOffset
	}
	return c
}

// Find returns the chunks [first, end) whose image data meets [off,
// off+n), by binary search (§3.4.4 step 4); none if the range is empty or
// past the end.
func (x *Index) Find(off, n uint64) (first, end int) {
	if n == 0 || off >= x.UncompressedSize {
		return 0, 0
	}
	last := min(off+n, x.UncompressedSize) // exclusive, no overflow past the size
	if off+n < off {
		last = x.UncompressedSize
	}
	// The chunk holding off: the last whose start is <= off.
	first = sort.Search(x.Len(), func(i int) bool { return x.UncompressedOffsets[i] > off }) - 1
	end = sort.Search(x.Len(), func(i int) bool { return x.UncompressedOffsets[i] >= last })
	return max(first, 0), end
}

// MarshalBinary encodes the index: header, then entries (§3.4.1, §3.4.2).
func (x *Index) MarshalBinary() ([]byte, error) {
	if err := x.validate(); err != nil {
		return nil, err
	}
	b := make([]byte, x.PayloadSize())
	copy(b, magic[:])
	b[4] = 1
	b[5] = byte(x.Compression)
	le := binary.LittleEndian
	le.PutUint64(b[8:], x.UncompressedSize)
	le.PutUint32(b[16:], uint32(x.Len()))
	b[20] = byte(x.HashAlgo)
	b[21] = byte(x.HashSize)
	p := b[HeaderSize:]
	for i := range x.Len() {
		le.PutUint64(p, x.BlockOffsets[i])
		le.PutUint64(p[8:], x.UncompressedOffsets[i])
		copy(p[16:], x.Checksum(i))
		p = p[x.entrySize():]
	}
	return b, nil
}

// Parse decodes and checks an index's bytes (the payload: header and
// entries, no frame). An index this package cannot read is an
// ErrUnreadable error, one that breaks the format a *CorruptError. DataEnd
// is left for the caller, who knows the blob.
func Parse(b []byte) (*Index, error) {
	if len(b) < HeaderSize {
		return nil, corrupt(-1, "%d bytes, shorter than the %d-byte header", len(b), HeaderSize)
	}
	le := binary.LittleEndian
	switch {
	case !bytes.Equal(b[:4], magic[:]):
		return nil, corrupt(0, "magic %x, want %x", b[:4], magic)
	case b[4] != 1:
		return nil, unreadable("version %d, want 1", b[4])
	case b[5] > byte(Zstd):
		return nil, unreadable("CompressionType %d is none of 0 (none) and 1 (zstd)", b[5])
	case le.Uint16(b[6:]) != 0:
		return nil, unreadable("Flags %#x has bits this reader does not know", le.Uint16(b[6:]))
	case !allZero(b[22:32]):
		return nil, corrupt(22, "reserved header bytes are not zero")
	}
	x := &Index{Compression: Compression(b[5]), UncompressedSize: le.Uint64(b[8:]), HashAlgo: HashAlgo(b[20]), HashSize: int(b[21])}
	n := le.Uint32(b[16:])
	switch {
	case x.HashAlgo == HashNone && x.HashSize != 0:
		return nil, corrupt(21, "HashSize %d without a hash family (HashAlgo 0)", x.HashSize)
	case x.HashAlgo == HashSHA2 && x.HashSize != sha256.Size && x.HashSize != sha512.Size:
		return nil, unreadable("SHA-2 checksums of %d bytes (this reader knows 32, SHA-256, and 64, SHA-512)", x.HashSize)
	case x.HashAlgo > HashSHA2:
		return nil, unreadable("HashAlgo %d is none of 0 (none) and 1 (SHA-2)", x.HashAlgo)
	}
	if want := HeaderSize + uint64(n)*uint64(x.entrySize()); uint64(len(b)) != want {
		return nil, corrupt(-1, "%d bytes, but %d chunks of %d bytes after the header make %d", len(b), n, x.entrySize(), want)
	}
	x.BlockOffsets = make([]uint64, n)
	x.UncompressedOffsets = make([]uint64, n)
	x.Checksums = make([]byte, 0, int(n)*x.HashSize)
	p := b[HeaderSize:]
	for i := range int(n) {
		x.BlockOffsets[i] = le.Uint64(p)
		x.UncompressedOffsets[i] = le.Uint64(p[8:])
		x.Checksums = append(x.Checksums, p[16:x.entrySize()]...)
		p = p[x.entrySize():]
	}
	if err := x.validate(); err != nil {
		return nil, err
	}
	return x, nil
}

// validate checks what the entries must be to each other: the chunks
// start at 0 and tile the image data in order, and zstd chunks follow one
// another in the blob.
func (x *Index) validate() error {
	n := x.Len()
	switch {
	case len(x.BlockOffsets) != n || len(x.Checksums) != n*x.HashSize:
		return corrupt(-1, "%d block offsets and %d bytes of checksums for %d chunks", len(x.BlockOffsets), len(x.Checksums), n)
	case n > 1<<32-1:
		return corrupt(-1, "%d chunks, more than NumChunks holds", n)
	case x.HashSize > 255 || x.HashSize < 0:
		return corrupt(-1, "HashSize %d", x.HashSize)
	case n == 0 && x.UncompressedSize != 0:
		return corrupt(16, "no chunks for %d bytes of image data", x.UncompressedSize)
	case n > 0 && x.UncompressedOffsets[0] != 0:
		return corrupt(HeaderSize+8, "the first chunk starts at %d, not 0", x.UncompressedOffsets[0])
	}
	for i := range n {
		at := int64(HeaderSize + i*x.entrySize())
		u := x.UncompressedOffsets[i]
		if u >= x.UncompressedSize || i > 0 && u <= x.UncompressedOffsets[i-1] {
			return corrupt(at+8, "chunk %d starts at %d: not after chunk %d and before the end (%d)", i, u, i-1, x.UncompressedSize)
		}
		if x.Compression == Zstd && i > 0 && x.BlockOffsets[i] <= x.BlockOffsets[i-1] {
			return corrupt(at, "zstd chunk %d at blob offset %d, not after chunk %d's %d", i, x.BlockOffsets[i], i-1, x.BlockOffsets[i-1])
		}
		if x.Compression == None && x.BlockOffsets[i]+x.Chunk(i).Len < x.BlockOffsets[i] {
			return corrupt(at, "chunk %d at blob offset %d runs past 2^64", i, x.BlockOffsets[i])
		}
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
