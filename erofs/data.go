package erofs

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"
)

// chunkRun maps count consecutive logical chunks starting at lblk to
// physical chunks from block pblk on. Holes are the gaps between runs.
type chunkRun struct {
	lblk, count uint64
	pblk        uint32
	dev         uint16 // 0: the image; n: extra device n
}

// inlineRoom is the largest tail that fits one block next to ino's record,
// in the flat layouts and in the compressed ones (after the largest, FULL,
// index); -1 where none may go inline. The inode form and the xattr
// sharing are decided in Finish: the room assumes the largest (extended,
// every xattr inline), so a choice made now always fits later.
func (b *Builder) inlineRoom(ino *inode) (flat, z int) {
	flat, z = -1, -1
	core := ExtendedInodeSize + xattrAreaMax(ino.xattrs)
	if !b.opt.NoInlineData {
		flat = b.bs - core
	}
	lclusters := int((ino.size + uint64(b.bs) - 1) >> b.blkbits)
	if room := b.bs - (core + 4 + 16 + 8*lclusters); room > 0 {
		z = room
	}
	return flat, z
}

// canInline reports whether a flat file's tail of n bytes goes inline.
func (b *Builder) canInline(ino *inode, n int) bool {
	flat, _ := b.inlineRoom(ino)
	return n > 0 && n <= flat
}

// writeData streams a regular file's data to the output: full blocks go to
// the data area now; the tail goes to the spool (inline) or to a last,
// zero-padded block (FLAT_PLAIN).
func (b *Builder) writeData(ino *inode, e *Entry, r io.Reader) error {
	if r == nil {
		return errors.New("no data reader for a non-empty file")
	}
	sparse := e.Sparse && !b.opt.MinKernel.before(kernelChunked)
	chunked := b.chunkedFile(ino.size)
	if b.z == nil && b.zp != nil && !sparse && !chunked {
		return b.writePlain(e.Path, ino, r)
	}
	if b.zp != nil && (sparse || chunked) {
		// The output is written in order: the pipeline's files first.
		if err := b.zp.drain(b); err != nil {
			return err
		}
	}
	if chunked {
		return b.writeChunked(ino, r)
	}
	if sparse {
		return b.writeSparse(ino, r)
	}
	if b.z != nil {
		return b.writeCompressed(e.Path, ino, r, b.opt.Compression.Fragments)
	}
	size := ino.size
	full := size >> b.blkbits
	tail := int(size & uint64(b.bs-1))
	if err := b.flatFits(size); err != nil {
		return err
	}
	var h *xxhash.Digest
	if b.dedupes() {
		h = xxhash.New()
		r = io.TeeReader(r, h)
	}
	ino.startBlk = uint32(b.outBlk)
	if full > 0 {
		n, err := io.CopyN(b.out, r, int64(full<<b.blkbits))
		if err != nil {
			return shortData(n, size, err)
		}
		b.outBlk += full
	}
	buf := b.scratch[:tail]
	if n, err := io.ReadFull(r, buf); err != nil {
		return shortData(int64(full<<b.blkbits)+int64(n), size, err)
	}
	var orig *inode
	if h != nil {
		inlineFlat, _ := b.inlineRoom(ino)
		content := concat(b.blockPieces(uint64(ino.startBlk), full<<b.blkbits), onePiece(buf))
		var err error
		if orig, err = b.dupOf(newDupKey(h.Sum64(), size), ino, 0, inlineFlat, content); err != nil {
			return err
		}
	}
	return b.flatDone(ino, orig, buf)
}

// flatFits reports an uncompressed file of size bytes that would not fit
// in the image's 2^32 blocks where the data area stands.
func (b *Builder) flatFits(size uint64) error {
	if b.outBlk+(size>>b.blkbits)+1 > 1<<32 {
		return errors.New("image would exceed 2^32 blocks")
	}
	return nil
}

// flatDone completes an uncompressed file whose full blocks are written
// from ino.startBlk: it shares orig's data, if orig is not nil, and those
// blocks are rewound over; else its tail goes inline or to a last,
// zero-padded block.
func (b *Builder) flatDone(ino, orig *inode, tail []byte) error {
	if orig != nil {
		start := uint64(ino.startBlk)
		b.share(ino, orig)
		if err := b.rewind(start); err != nil {
			return err
		}
		return b.promoteTail(orig, ino)
	}
	ino.layout = LayoutFlatPlain
	if len(tail) == 0 {
		return nil
	}
	if b.canInline(ino, len(tail)) {
		ref, err := b.spoolTail(tail)
		if err != nil {
			return err
		}
		ino.tail = ref
		ino.layout = LayoutFlatInline
		if ino.size < uint64(b.bs) {
			ino.startBlk = NullAddr
		}
		return nil
	}
	return b.writePadded(tail)
}

// writePlain hands an uncompressed file to the pipeline a segment at a
// time, so that the workers take its hash for whole-file dedupe and the
// goroutine that parses the input and writes the output hashes nothing
// (zpipe.dupOf); applyPlain then writes it as writeData does (the build
// pipeline table of docs/performance.md has what that saves). The
// pipeline is there only with dedupe and more than one worker: one worker
// hashes as it copies, in writeData, which saves a copy.
func (b *Builder) writePlain(path string, ino *inode, r io.Reader) error {
	inlineFlat, _ := b.inlineRoom(ino)
	t := zjob{ino: ino, path: path, hash: true, plain: true, inlineFlat: inlineFlat}
	return b.zp.split(b, r, ino.size, t, false)
}

// applyPlain writes a segment of an uncompressed file (writePlain): its
// full blocks, unless it is the last of a duplicate; the last completes the
// file as writeData does (flatDone).
func (b *Builder) applyPlain(j *zjob) error {
	ino := j.ino
	if j.base == 0 {
		if err := b.flatFits(ino.size); err != nil {
			return err
		}
		ino.startBlk = uint32(b.outBlk)
	}
	orig, err := b.zp.dupOf(b, j)
	if err != nil {
		return err
	}
	full := len(j.data) &^ (b.bs - 1)
	if orig == nil && full > 0 {
		if err := b.writeMaybeRef(j.data[:full], b.zp.refs(j)); err != nil {
			return err
		}
		b.outBlk += uint64(full) >> b.blkbits
	}
	if !j.last {
		return nil
	}
	return b.flatDone(ino, orig, j.data[full:])
}

// maxChunks bounds the chunk map of one sparse file (4 bytes each), so a
// tar claiming a huge sparse size cannot make the inode record huge.
const maxChunks = 1 << 20

// writeSparse stores a file chunk-based: all-zero chunks become holes and
// cost nothing but their 4-byte map entry. Chunks are one block unless the
// file is so large that the map would exceed maxChunks entries.
func (b *Builder) writeSparse(ino *inode, r io.Reader) error {
	size := ino.size
	nblk := (size + uint64(b.bs) - 1) >> b.blkbits
	var cbits uint // log2(blocks per chunk)
	for nblk>>cbits > maxChunks {
		cbits++
	}
	// Holes of a sparse tar entry are zeros the reader makes up, not bytes
	// of the input: cap the logical size so a forged header cannot keep us
	// busy for hours (1 TiB with 4 KiB blocks).
	if b.bs<<cbits > 1<<20 {
		return fmt.Errorf("sparse file of %d bytes: larger than %d chunks of 1 MiB", size, maxChunks)
	}
	chunk := b.bs << cbits
	ino.setChunks(nil, (size+uint64(chunk)-1)/uint64(chunk), uint8(cbits))
	buf := b.scratch
	if len(buf) < chunk {
		buf = make([]byte, chunk)
	}
	var done int64
	for l := uint64(0); done < int64(size); l++ {
		n := min(int64(chunk), int64(size)-done)
		cb := buf[:n]
		if m, err := io.ReadFull(r, cb); err != nil {
			return shortData(done+int64(m), size, err)
		}
		done += n
		if isZero(cb) {
			continue
		}
		blks := (uint64(n) + uint64(b.bs) - 1) >> b.blkbits
		if b.outBlk+blks >= 1<<32-1 {
			return errors.New("image would exceed 2^32 blocks")
		}
		ino.addChunk(l, 0, uint32(b.outBlk))
		if _, err := b.out.Write(cb); err != nil {
			return err
		}
		if err := b.padBlock(uint64(n)); err != nil {
			return err
		}
	}
	ino.layout = LayoutChunkBased
	b.chunked = true
	ino.widenChunks()
	return nil
}

// addChunk records that logical chunk l starts at block pblk of device
// dev, extending the last run when it continues it.
func (ino *inode) addChunk(l uint64, dev uint16, pblk uint32) {
	r := ino.rare()
	if k := len(r.chunks) - 1; k >= 0 {
		c := &r.chunks[k]
		if c.lblk+c.count == l && c.dev == dev && uint64(c.pblk)+c.count<<ino.chunkBits == uint64(pblk) {
			c.count++
			return
		}
	}
	r.chunks = append(r.chunks, chunkRun{lblk: l, count: 1, pblk: pblk, dev: dev})
}

func isZero(p []byte) bool {
	for len(p) >= len(zeroBlock) {
		if !bytes.Equal(p[:len(zeroBlock)], zeroBlock) {
			return false
		}
		p = p[len(zeroBlock):]
	}
	return bytes.Equal(p, zeroBlock[:len(p)])
}

func shortData(got int64, want uint64, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("data ends after %d of %d bytes: %w", got, want, err)
}

// DataAt is a regular file's data for Add, the n bytes of r at off, that
// the Builder may read after Add returns, on its workers, until Finish: r
// must stay readable and unchanged until then. A compressed file's data is
// then read by the worker that compresses it, and the goroutine calling
// Add, the one that parses the input and writes the output, copies none
// of it (a plain tar file on disk: mkfs --tar). The result is the same as
// with any other reader of those bytes.
func DataAt(r io.ReaderAt, off, n int64) io.Reader {
	return dataAt{io.NewSectionReader(r, off, n)}
}

type dataAt struct{ *io.SectionReader }
