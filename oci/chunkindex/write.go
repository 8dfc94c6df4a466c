package chunkindex

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io"

	"github.com/klauspost/compress/zstd"
)

// WriterOptions shape the blob a Writer makes.
type WriterOptions struct {
	// Compression: None writes the image data as it is, Zstd one zstd
	// frame per chunk.
	Compression Compression
	// ChunkSize is the image data of a chunk (default DefaultChunkSize).
	ChunkSize int
	// NoChecksums leaves the per-chunk checksums out (HashAlgo 0); by
	// default each chunk has its SHA-256.
	NoChecksums bool
	// ZstdLevel is the encoder's level (default zstd.SpeedDefault).
	ZstdLevel zstd.EncoderLevel
}

// Writer cuts the image data written to it into chunks, writes each to the
// blob (as it is, or as one zstd frame) and indexes it. The chunks depend
// only on the data and the options, so the same data makes the same blob
// and index.
type Writer struct {
	w    io.Writer
	opt  WriterOptions
	enc  *zstd.Encoder
	x    *Index
	buf  []byte // the chunk being filled
	zbuf []byte
	pos  uint64 // blob bytes written
	last hash.Hash
	err  error
}

// NewWriter writes a blob's data part to w.
func NewWriter(w io.Writer, opt WriterOptions) (*Writer, error) {
	if opt.ChunkSize == 0 {
		opt.ChunkSize = DefaultChunkSize
	}
	if opt.ChunkSize < 4096 || opt.ChunkSize&(opt.ChunkSize-1) != 0 || opt.ChunkSize > 64<<20 {
		return nil, fmt.Errorf("chunk index: chunk size %d is not a power of two from 4096 to 64 MiB", opt.ChunkSize)
	}
	if opt.Compression > Zstd {
		return nil, fmt.Errorf("chunk index: %s", opt.Compression)
	}
	x := &Index{Compression: opt.Compression}
	if !opt.NoChecksums {
		x.HashAlgo, x.HashSize = HashSHA2, sha256.Size
	}
	cw := &Writer{w: w, opt: opt, x: x, buf: make([]byte, 0, opt.ChunkSize)}
	if opt.Compression == Zstd {
		level := opt.ZstdLevel
		if level == 0 {
			level = zstd.SpeedDefault
		}
		// One goroutine and no dictionary: a chunk's frame is a function
		// of its bytes and the level.
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(level))
		if err != nil {
			return nil, err
		}
		cw.enc = enc
	}
	return cw, nil
}

// Write takes image data.
func (cw *Writer) Write(p []byte) (int, error) {
	if cw.err != nil {
		return 0, cw.err
	}
	n := 0
	for len(p) > 0 {
		m := min(len(p), cap(cw.buf)-len(cw.buf))
		cw.buf = append(cw.buf, p[:m]...)
		p, n = p[m:], n+m
		if len(cw.buf) == cap(cw.buf) {
			if cw.err = cw.flush(); cw.err != nil {
				return n, cw.err
			}
		}
	}
	return n, nil
}

// flush writes the chunk in buf.
func (cw *Writer) flush() error {
	if len(cw.buf) == 0 {
		return nil
	}
	out := cw.buf
	if cw.enc != nil {
		cw.zbuf = cw.enc.EncodeAll(cw.buf, cw.zbuf[:0])
		out = cw.zbuf
	}
	if _, err := cw.w.Write(out); err != nil {
		return err
	}
	x := cw.x
	x.BlockOffsets = append(x.BlockOffsets, cw.pos)
	x.UncompressedOffsets = append(x.UncompressedOffsets, x.UncompressedSize)
	if x.HashSize > 0 {
		cw.closeSum()
		// The last chunk's sum is kept open: padding written after it
		// belongs to its bytes in the blob (Finish).
		cw.last = sha256.New()
		cw.last.Write(out)
	}
	cw.pos += uint64(len(out))
	x.UncompressedSize += uint64(len(cw.buf))
	cw.buf = cw.buf[:0]
	return nil
}

// Finish ends the data and returns its index; with embed, it writes the
// index after the data, as §3.4.3 embeds it, and returns its Range in the
// blob. Without, the index is for a standalone layer (its payload:
// MarshalBinary), and DataEnd is the blob's size.
//
// A zstd blob's index goes in a skippable frame at a 4-byte aligned
// offset, after a skippable frame of padding where needed. The padding is
// then part of the last chunk's bytes in the blob, as the last chunk's
// length is the distance to the index's section (§3.4.2): its checksum
// covers it, and zstd decoders skip it.
func (cw *Writer) Finish(embed bool) (*Index, Range, error) {
	if cw.err != nil {
		return nil, Range{}, cw.err
	}
	if err := cw.flush(); err != nil {
		return nil, Range{}, err
	}
	x := cw.x
	if embed && x.Compression == Zstd {
		if pad := cw.pos % 4; pad != 0 {
			frame := make([]byte, frameHeaderSize+(4-pad))
			binary.LittleEndian.PutUint32(frame, skippableMagicLo)
			binary.LittleEndian.PutUint32(frame[4:], uint32(len(frame)-frameHeaderSize))
			if _, err := cw.w.Write(frame); err != nil {
				return nil, Range{}, err
			}
			if cw.last != nil {
				cw.last.Write(frame)
			}
			cw.pos += uint64(len(frame))
		}
	}
	x.DataEnd = cw.pos
	cw.closeSum()
	if !embed {
		return x, Range{}, nil
	}
	payload, err := x.MarshalBinary()
	if err != nil {
		return nil, Range{}, err
	}
	r := Range{Offset: int64(cw.pos)}
	if x.Compression == Zstd {
		var hdr [frameHeaderSize]byte
		binary.LittleEndian.PutUint32(hdr[:], skippableMagicLo)
		binary.LittleEndian.PutUint32(hdr[4:], uint32(len(payload)))
		if _, err := cw.w.Write(hdr[:]); err != nil {
			return nil, Range{}, err
		}
		cw.pos += frameHeaderSize
	}
	if _, err := cw.w.Write(payload); err != nil {
		return nil, Range{}, err
	}
	cw.pos += uint64(len(payload))
	r.End = int64(cw.pos)
	return x, r, nil
}

// closeSum ends the open chunk's checksum.
func (cw *Writer) closeSum() {
	if cw.last != nil {
		cw.x.Checksums = cw.last.Sum(cw.x.Checksums)
		cw.last = nil
	}
}
