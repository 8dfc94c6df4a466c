package erofs

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"math/bits"
)

// Chunk-based files (layout CHUNK_BASED, erofs-format.md §10.1). With
// Options.ChunkSize a regular file is cut into chunks; each chunk is hashed
// (SHA-256) and stored once in the whole image however many files, or
// places in one file, hold it. All-zero chunks are holes. After a file is
// written its chunks are widened to the largest power of two its layout
// allows, so a file with nothing shared keeps a single index entry.
//
// Chunk data goes to the image (device 0) or, with Options.Blob, to a
// separate blob that the image names as extra device 1; then every index
// is 8 bytes and carries its device id.
//
// Memory: one table entry per distinct chunk (chunktable.go: 32 bytes and
// a 4-byte index slot).

// ChunkRef is where one chunk of a file is stored: Block on Device (0 is
// the image itself, n ≥ 1 is Options.Devices[n-1]), or nowhere (Hole: the
// chunk reads as zeros).
type ChunkRef struct {
	Device uint16
	Block  uint32
	Hole   bool
}

// chunkKey is the SHA-256 of a chunk's content.
type chunkKey [sha256.Size]byte

// chunkLoc is where a stored chunk is.
type chunkLoc struct {
	dev uint16
	blk uint32
}

// chunkBufSize is the largest chunk read whole before it is written;
// larger chunks are written as they are read and rewound over when they
// turn out to be duplicates or zeros.
const chunkBufSize = 1 << 20

// chunkSink is where chunk data goes: the image (device 0) or the blob
// (device 1).
type chunkSink struct {
	*blockWriter
	dev uint16
}

func (b *Builder) sink() chunkSink {
	if b.blob != nil {
		return chunkSink{b.blob, 1}
	}
	return chunkSink{&b.blockWriter, 0}
}

// chunked reports whether a regular file of size bytes is stored
// chunk-based. A file smaller than one chunk has one chunk's worth of
// dedupe anyway (whole-file dedupe), so it keeps the flat layout and its
// inline tail, unless its data must go to the blob.
func (b *Builder) chunkedFile(size uint64) bool {
	if b.blob != nil {
		return true
	}
	return b.opt.ChunkSize > 0 && size >= uint64(b.opt.ChunkSize)
}

// writeChunked stores a file chunk by chunk, each distinct chunk once.
func (b *Builder) writeChunked(ino *inode, r io.Reader) error {
	s := b.sink()
	size := ino.size
	cs := uint64(b.opt.ChunkSize)
	if cs == 0 {
		cs = uint64(b.bs)
	}
	cbits := uint(bits.TrailingZeros64(cs)) - b.blkbits
	nblk := (size + uint64(b.bs) - 1) >> b.blkbits
	for nblk>>cbits > maxChunks {
		cbits++ // keep the index of a huge file bounded
	}
	cs = uint64(b.bs) << cbits
	ino.setChunks(nil, (size+cs-1)/cs, uint8(cbits))
	if b.chunkBuf == nil {
		b.chunkBuf = make([]byte, min(cs, chunkBufSize))
		b.chunkHash = sha256.New()
	}
	h := b.chunkHash
	// The file's own key for whole-file dedupe: its size and the hashes
	// of its chunks (a hole as zeros), so a copy of an earlier file shares
	// its layout — inline tail included — instead of only its chunks.
	fh := sha256.New()
	binary.Write(fh, binary.LittleEndian, [3]uint64{0x6368756e6b73, cs, size}) // "chunks"
	fileStart := s.outBlk
	var done uint64
	for l := uint64(0); done < size; l++ {
		n := min(cs, size-done)
		start := s.outBlk
		if start+(n+uint64(b.bs)-1)>>b.blkbits >= 1<<32-1 {
			return errors.New("data would exceed 2^32 blocks")
		}
		h.Reset()
		zero, written, err := b.readChunk(s, r, h, n, done, size)
		if err != nil {
			return err
		}
		done += n
		var k chunkKey
		if !zero {
			h.Sum(k[:0])
		}
		fh.Write(k[:])
		// A copy's earlier chunks all hit the table, so nothing of it is
		// written yet; if something was, the table points into it: keep it.
		if done == size {
			var fk chunkKey
			fh.Sum(fk[:0])
			inlineFlat, _ := b.inlineRoom(ino)
			if orig := b.chunkDupOf(fk, ino, inlineFlat); orig != nil && s.outBlk == fileStart {
				b.share(ino, orig)
				// A copy of a file chunking stored flat with its tail
				// inline shares that tail as a flat file's copies do.
				return b.promoteTail(orig, ino)
			}
		}
		if zero {
			if written {
				if err := s.rewind(start); err != nil {
					return err
				}
			}
			continue
		}
		if loc, ok := b.chunks.lookup(&k); ok {
			if written {
				if err := s.rewind(start); err != nil {
					return err
				}
			}
			ino.addChunk(l, loc.dev, loc.blk)
			b.chunkSaved += int64(n)
			continue
		}
		if !written && done == size {
			if ok, err := b.chunkFlatTail(ino, l, start, b.chunkBuf[:n]); ok || err != nil {
				return err
			}
		}
		if !written {
			if err := s.write(b.chunkBuf[:n]); err != nil {
				return err
			}
			if err := s.padBlock(n); err != nil {
				return err
			}
		}
		loc := chunkLoc{s.dev, uint32(start)}
		b.chunks.add(&k, loc)
		ino.addChunk(l, loc.dev, loc.blk)
	}
	ino.layout = LayoutChunkBased
	b.chunked = true
	ino.widenChunks()
	return nil
}

// chunkFlatTail stores a chunk-based file as a flat one with an inline tail
// when chunking found nothing in it to share: every chunk before its new
// last chunk p (chunk l) was stored just now, in order, so the file's
// data is contiguous, and the partial block at its end can go inline as
// in any flat file instead of taking a block of its own. ok reports that
// the file is stored so.
func (b *Builder) chunkFlatTail(ino *inode, l, start uint64, p []byte) (ok bool, err error) {
	tail := len(p) & (b.bs - 1)
	if b.blob != nil || tail == 0 || !b.canInline(ino, tail) || len(ino.chunks) != 1 {
		return false, nil
	}
	c := ino.chunks[0]
	if c.dev != 0 || c.lblk != 0 || c.count != l || uint64(c.pblk)+c.count<<ino.chunkBits != start {
		return false, nil
	}
	full := len(p) - tail
	if _, err := b.out.Write(p[:full]); err != nil {
		return false, err
	}
	b.outBlk += uint64(full) >> b.blkbits
	ref, err := b.spoolTail(p[full:])
	if err != nil {
		return false, err
	}
	ino.tail, ino.startBlk, ino.layout = ref, c.pblk, LayoutFlatInline
	ino.setChunks(nil, 0, 0)
	return true, nil
}

// readChunk reads the next n bytes of a file into the hash. A chunk that
// fits the buffer stays there (written reports false); a larger one is
// written to s as it is read, and padded to a block.
func (b *Builder) readChunk(s chunkSink, r io.Reader, h hash.Hash, n, done, size uint64) (zero, written bool, err error) {
	buf := b.chunkBuf
	if n <= uint64(len(buf)) {
		p := buf[:n]
		if m, err := io.ReadFull(r, p); err != nil {
			return false, false, shortData(int64(done)+int64(m), size, err)
		}
		if isZero(p) {
			return true, false, nil
		}
		h.Write(p)
		return false, false, nil
	}
	zero = true
	for left := n; left > 0; {
		p := buf[:min(left, uint64(len(buf)))]
		if m, err := io.ReadFull(r, p); err != nil {
			return false, true, shortData(int64(done+n-left)+int64(m), size, err)
		}
		zero = zero && isZero(p)
		h.Write(p)
		if err := s.write(p); err != nil {
			return false, true, err
		}
		left -= uint64(len(p))
	}
	return zero, true, s.padBlock(n)
}

// widenChunks doubles the chunk size while every chunk of the doubled size
// is still one contiguous run on one device or one hole: the index gets
// half as long and reads the same. Runs are maximal (addChunk), so a run
// that starts or ends inside a doubled chunk means it is not contiguous.
func (ino *inode) widenChunks() {
	for ino.chunkBits < maxChunkBits && ino.nchunks > 1 {
		for _, c := range ino.chunks {
			end := c.lblk + c.count
			if c.lblk%2 != 0 || end%2 != 0 && end != ino.nchunks {
				return
			}
		}
		r := ino.rare()
		for i := range r.chunks {
			c := &r.chunks[i]
			c.lblk /= 2
			c.count = (c.count + 1) / 2
		}
		r.chunkBits++
		r.nchunks = (r.nchunks + 1) / 2
	}
}

// maxChunkBits is the widest chunk the format can say (5 bits of i_u).
const maxChunkBits = 31

// AddChunks adds a regular file whose data is already stored, in chunks of
// BlockSize<<chunkBits bytes: refs[i] is where chunk i is (see ChunkRef),
// and there must be one per chunk of e.Size bytes. Chunk i covers its
// chunk's blocks from refs[i].Block on, contiguously. A tar index and a
// merged image are made of such files.
func (b *Builder) AddChunks(e Entry, chunkBits uint8, refs []ChunkRef) error {
	if e.HardLink != "" {
		return b.Add(e, nil)
	}
	f, err := b.WriteChunks(e, chunkBits, refs)
	if err != nil {
		return err
	}
	return b.Link(e.Path, f)
}

// WriteChunks is AddChunks without a path: the file, unlinked.
func (b *Builder) WriteChunks(e Entry, chunkBits uint8, refs []ChunkRef) (*File, error) {
	if e.Mode&S_IFMT != S_IFREG || e.HardLink != "" {
		return nil, fmt.Errorf("erofs: entry %q: WriteChunks needs a regular file", e.Path)
	}
	if chunkBits > maxChunkBits {
		return nil, fmt.Errorf("erofs: entry %q: chunk bits %d > %d", e.Path, chunkBits, maxChunkBits)
	}
	cbits := b.blkbits + uint(chunkBits)
	want := (uint64(max(e.Size, 0)) + 1<<cbits - 1) >> cbits
	if uint64(len(refs)) != want {
		return nil, fmt.Errorf("erofs: entry %q: %d chunk refs for %d chunks", e.Path, len(refs), want)
	}
	if want > maxChunks {
		return nil, fmt.Errorf("erofs: entry %q: %d chunks, more than %d", e.Path, want, maxChunks)
	}
	blks := uint64(1) << chunkBits
	for i, c := range refs {
		if c.Hole {
			continue
		}
		if int(c.Device) > len(b.opt.Devices) {
			return nil, fmt.Errorf("erofs: entry %q: chunk %d on device %d, the image has %d", e.Path, i, c.Device, len(b.opt.Devices))
		}
		if c.Device > 0 {
			d := b.opt.Devices[c.Device-1]
			// The last chunk ends with the file, not with the chunk.
			n := min(blks, (uint64(e.Size)-uint64(i)<<cbits+uint64(b.bs)-1)>>b.blkbits)
			switch end := uint64(c.Block) + n; {
			case d.Blocks != 0 && end > d.Blocks:
				return nil, fmt.Errorf("erofs: entry %q: chunk %d at block %d+%d beyond device %d (%d blocks)", e.Path, i, c.Block, n, c.Device, d.Blocks)
			case d.Blocks == 0:
				// Its size comes later (SetDeviceBlocks), and must
				// reach this far.
				if b.devEnd == nil {
					b.devEnd = make([]uint64, len(b.opt.Devices))
				}
				b.devEnd[c.Device-1] = max(b.devEnd[c.Device-1], end)
			}
		} else if c.Block == NullAddr {
			return nil, fmt.Errorf("erofs: entry %q: chunk %d at the null block", e.Path, i)
		}
	}
	ino, err := b.newFile(e, func(ino *inode) error {
		ino.setChunks(nil, want, chunkBits)
		for i, c := range refs {
			if !c.Hole {
				ino.addChunk(uint64(i), c.Device, c.Block)
			}
		}
		ino.layout = LayoutChunkBased
		b.chunked = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &File{ino: ino}, nil
}

// KnownChunk records that a chunk with content data is already stored at
// block blk of extra device dev (2 … n: the Blob is device 1), so that a
// chunk equal to it refers there instead of being stored again: a chunk
// dictionary of the layers below, whose blobs then serve this image too.
// data is one chunk (ChunkSize bytes, or one block without ChunkSize) or
// the shorter last chunk of a file.
func (b *Builder) KnownChunk(data []byte, dev uint16, blk uint32) error {
	cs := b.opt.ChunkSize
	if cs == 0 {
		cs = b.bs
	}
	switch {
	case b.blob == nil:
		return errors.New("erofs: a chunk dictionary needs a Blob")
	case dev < 2 || int(dev) > len(b.opt.Devices):
		return fmt.Errorf("erofs: known chunk on device %d: want 2 … %d", dev, len(b.opt.Devices))
	case len(data) == 0 || len(data) > cs:
		return fmt.Errorf("erofs: known chunk of %d bytes: want 1 … %d", len(data), cs)
	case blk == NullAddr:
		return errors.New("erofs: known chunk at the null block")
	}
	k := chunkKey(sha256.Sum256(data))
	if _, ok := b.chunks.lookup(&k); !ok {
		b.chunks.add(&k, chunkLoc{dev, blk})
	}
	return nil
}

// SetDeviceBlocks sets the size in blocks of extra device n (1-based), for
// a device whose size is known only once the input has been read: the tar
// of a tar index read from a stream. The chunks added so far must lie
// within it.
func (b *Builder) SetDeviceBlocks(n int, blocks uint64) error {
	if n < 1 || n > len(b.opt.Devices) {
		return fmt.Errorf("erofs: device %d: the image has %d", n, len(b.opt.Devices))
	}
	if blocks >= 1<<32 {
		return fmt.Errorf("erofs: device %d: %d blocks exceed 2^32", n, blocks)
	}
	if b.devEnd != nil && b.devEnd[n-1] > blocks {
		return fmt.Errorf("erofs: device %d: %d blocks, but a chunk ends at block %d", n, blocks, b.devEnd[n-1])
	}
	b.opt.Devices[n-1].Blocks = blocks
	return nil
}
