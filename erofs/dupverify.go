package erofs

import (
	"bytes"
	"errors"
	"fmt"
	"iter"
)

// Whole-file dedupe finds its candidates by a fast hash that proves
// nothing (dedupe.go), so before a file shares an earlier one's data the
// two are compared byte for byte: both are read back as they are stored
// (the output, the tail spool, the packed inode's spool) and decompressed
// where they are compressed. Only duplicates and collisions pay for it:
// the comparison stops at the first byte that differs.

// pieces is a file's content, a piece at a time, in order. A piece stays
// valid until the next is asked for.
type pieces = iter.Seq2[[]byte, error]

// sameContent reports whether the pieces of a and b make the same bytes.
func sameContent(a, b pieces) (bool, error) {
	na, stopA := iter.Pull2(a)
	defer stopA()
	nb, stopB := iter.Pull2(b)
	defer stopB()
	var pa, pb []byte
	for {
		for len(pa) == 0 {
			p, err, ok := na()
			if !ok {
				pa = nil
				break
			}
			if err != nil {
				return false, err
			}
			pa = p
		}
		for len(pb) == 0 {
			p, err, ok := nb()
			if !ok {
				pb = nil
				break
			}
			if err != nil {
				return false, err
			}
			pb = p
		}
		if len(pa) == 0 || len(pb) == 0 {
			return len(pa) == len(pb), nil
		}
		n := min(len(pa), len(pb))
		if !bytes.Equal(pa[:n], pb[:n]) {
			return false, nil
		}
		pa, pb = pa[n:], pb[n:]
	}
}

// readBack reads p from the output at block blk, written or still
// buffered.
func (b *Builder) readBack(p []byte, blk uint64) error {
	if b.rdr == nil {
		return errors.New("internal: the output cannot be read back")
	}
	bs := uint64(b.bs)
	off := blk * bs
	if off+uint64(len(p)) > b.outBlk*bs-uint64(b.out.Buffered()) {
		if err := b.out.Flush(); err != nil {
			return err
		}
	}
	// No write may run beside the read (zdedupe.decoded).
	if err := b.out.settle(); err != nil {
		return err
	}
	if _, err := b.rdr.ReadAt(p, int64(off)); err != nil {
		return fmt.Errorf("dedupe: reading back block %d: %w", blk, err)
	}
	return nil
}

// readPiece is the largest piece read back from the output at once.
const readPiece = 256 << 10

// blockPieces yields n bytes of the output from block blk on; each
// iteration reads them anew.
func (b *Builder) blockPieces(start, size uint64) pieces {
	return func(yield func([]byte, error) bool) {
		blk, n := start, size
		mask := uint64(b.bs - 1)
		buf := make([]byte, (min(n, readPiece)+mask)&^mask)
		for n > 0 {
			k := min(n, readPiece)
			// Whole blocks: the last one is padded.
			p := buf[:(k+mask)&^mask]
			if err := b.readBack(p, blk); err != nil {
				yield(nil, err)
				return
			}
			if !yield(p[:k], nil) {
				return
			}
			blk += k >> b.blkbits
			n -= k
		}
	}
}

// spoolPiece yields n bytes of a spool at off.
func spoolPiece(s *tailSpool, off int64, n int) pieces {
	return func(yield func([]byte, error) bool) {
		if n == 0 {
			return
		}
		if s == nil {
			yield(nil, errors.New("internal: a tail in a spool never written"))
			return
		}
		p := make([]byte, n)
		if err := s.readAt(p, off); err != nil {
			yield(nil, fmt.Errorf("dedupe: reading back a tail: %w", err))
			return
		}
		yield(p, nil)
	}
}

// storedPieces is the content of a file already stored: flat, chunk-based
// or compressed.
func (b *Builder) storedPieces(ino *inode) pieces {
	if ino.z != nil {
		return b.zPieces(ino.z.extents, ino.z, ino.startBlk, nil)
	}
	size := ino.size
	switch ino.layout {
	case LayoutFlatPlain:
		return b.blockPieces(uint64(ino.startBlk), size)
	case LayoutFlatInline:
		full := size &^ uint64(b.bs-1)
		return concat(b.blockPieces(uint64(ino.startBlk), full), spoolPiece(b.spool, ino.tail.off(), ino.tail.n()))
	case LayoutChunkBased:
		return b.chunkPieces(ino)
	}
	return func(yield func([]byte, error) bool) {
		yield(nil, fmt.Errorf("internal: dedupe of a file of layout %d", ino.layout))
	}
}

// chunkPieces is the content of a chunk-based file in the image (holes
// are zeros).
func (b *Builder) chunkPieces(ino *inode) pieces {
	return func(yield func([]byte, error) bool) {
		cs := uint64(b.bs) << ino.chunkBits
		var pos uint64 // bytes yielded
		zeros := func(end uint64) bool {
			for pos < end {
				k := min(end-pos, uint64(len(zeroBlock)))
				if !yield(zeroBlock[:k], nil) {
					return false
				}
				pos += k
			}
			return true
		}
		for _, c := range ino.chunks {
			if c.dev != 0 {
				yield(nil, errors.New("internal: dedupe of a file on an extra device"))
				return
			}
			if !zeros(min(c.lblk*cs, ino.size)) {
				return
			}
			n := min((c.lblk+c.count)*cs, ino.size) - pos
			for p, err := range b.blockPieces(uint64(c.pblk), n) {
				if !yield(p, err) || err != nil {
					return
				}
			}
			pos += n
		}
		zeros(ino.size)
	}
}

// zPieces is the content of a compressed file: its extents (its own
// pclusters from block start on), then the steps of j, the file's last
// job when it is not applied yet.
func (b *Builder) zPieces(extents []zextent, zf *zfile, start uint32, j *zjob) pieces {
	return func(yield func([]byte, error) bool) {
		alg := b.z.c.Algorithm
		pblk := start
		for _, e := range extents {
			var p []byte
			var err error
			switch e.kind {
			case zPlain, zCompressed:
				at := pblk
				if e.share == zShareFull || e.share == zSharePartial {
					at = e.pblk
				} else {
					pblk += uint32(e.blocks)
				}
				raw := make([]byte, int(e.blocks)<<b.blkbits)
				if err = b.readBack(raw, uint64(at)); err != nil {
					break
				}
				if e.kind == zPlain {
					p = raw[:e.length]
					break
				}
				// 0padding: leading zeros of the first block are padding.
				s := 0
				for s < b.bs && raw[s] == 0 {
					s++
				}
				p, err = decodeZ(alg, raw[s:], int(e.length), e.share == zSharePartial || e.share == zOwnPartial)
			case zInline:
				p = make([]byte, zf.inline.n())
				if err = b.spool.readAt(p, zf.inline.off()); err != nil || zf.plainIn {
					break
				}
				p, err = decodeZ(alg, p, int(e.length), false)
			case zFragment:
				p = make([]byte, e.length)
				if b.z.packed == nil {
					err = errors.New("internal: a fragment never written")
					break
				}
				err = b.z.packed.readAt(p, int64(zf.fragOff))
			}
			if err != nil {
				yield(nil, fmt.Errorf("dedupe: reading back an extent: %w", err))
				return
			}
			if !yield(p, nil) {
				return
			}
		}
		if j == nil {
			return
		}
		for _, op := range j.ops {
			p := j.opBytes(op)
			var err error
			if op.kind == zCompressed || op.kind == zopInlineZ {
				p, err = decodeZ(alg, p, int(op.length), false)
			}
			if !yield(p, err) || err != nil {
				return
			}
		}
	}
}

// decodeZ decompresses a stream to n bytes, or to its first n with prefix.
func decodeZ(alg Algorithm, src []byte, n int, prefix bool) ([]byte, error) {
	dst := make([]byte, n)
	decompress := codecs[alg].decompress
	if prefix {
		decompress = decompressPrefix(alg)
	}
	if err := decompress(dst, src); err != nil {
		return nil, err
	}
	return dst, nil
}

// concat yields the pieces of each in turn.
func concat(each ...pieces) pieces {
	return func(yield func([]byte, error) bool) {
		for _, s := range each {
			for p, err := range s {
				if !yield(p, err) || err != nil {
					return
				}
			}
		}
	}
}

// onePiece yields p.
func onePiece(p []byte) pieces {
	return func(yield func([]byte, error) bool) {
		if len(p) > 0 {
			yield(p, nil)
		}
	}
}
