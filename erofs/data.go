package erofs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// chunkRun maps count consecutive logical blocks starting at lblk to
// physical blocks from pblk on. Holes are the gaps between runs.
type chunkRun struct {
	lblk, count uint64
	pblk        uint32
}

// maxInlineRecord is the largest inode record (core, xattrs, tail) that may
// hold an inline tail: it must fit one block.
func (b *Builder) canInline(ino *inode, tail int) bool {
	if b.opt.NoInlineData || tail == 0 {
		return false
	}
	// The inode form and the xattr sharing are decided in Finish; assume
	// the largest (extended, every xattr inline) so the choice made now
	// always fits later.
	return ExtendedInodeSize+xattrAreaMax(ino.xattrs)+tail <= b.bs
}

// writeData streams a regular file's data to the output: full blocks go to
// the data area now; the tail goes to the spool (inline) or to a last,
// zero-padded block (FLAT_PLAIN).
func (b *Builder) writeData(ino *inode, e *Entry, r io.Reader) error {
	if r == nil {
		return errors.New("no data reader for a non-empty file")
	}
	if e.Sparse {
		return b.writeSparse(ino, r)
	}
	size := ino.size
	full := size >> b.blkbits
	tail := int(size & uint64(b.bs-1))
	if b.outBlk+full+1 > 1<<32 {
		return errors.New("image would exceed 2^32 blocks")
	}
	ino.startBlk = uint32(b.outBlk)
	if full > 0 {
		n, err := io.CopyN(b.out, r, int64(full<<b.blkbits))
		if err != nil {
			return shortData(n, size, err)
		}
		b.outBlk += full
	}
	ino.layout = LayoutFlatPlain
	if tail == 0 {
		return nil
	}
	buf := b.scratch[:tail]
	if n, err := io.ReadFull(r, buf); err != nil {
		return shortData(int64(full<<b.blkbits)+int64(n), size, err)
	}
	if b.canInline(ino, tail) {
		ref, err := b.spoolTail(buf)
		if err != nil {
			return err
		}
		ino.tail = ref
		ino.layout = LayoutFlatInline
		if full == 0 {
			ino.startBlk = NullAddr
		}
		return nil
	}
	return b.writeBlock(buf)
}

// writeBlock writes p (at most one block) as a whole, zero-padded block.
func (b *Builder) writeBlock(p []byte) error {
	if _, err := b.out.Write(p); err != nil {
		return err
	}
	if pad := b.bs - len(p); pad > 0 {
		if _, err := b.out.Write(zeroBlock[:pad]); err != nil {
			return err
		}
	}
	b.outBlk++
	return nil
}

var zeroBlock = make([]byte, 65536)

// writeSparse stores a file chunk-based with one-block chunks: all-zero
// blocks become holes and cost nothing but their 4-byte map entry.
func (b *Builder) writeSparse(ino *inode, r io.Reader) error {
	size := ino.size
	nblk := (size + uint64(b.bs) - 1) >> b.blkbits
	if nblk > 1<<32 {
		return errors.New("sparse file too large")
	}
	var done int64
	for l := uint64(0); l < nblk; l++ {
		n := b.bs
		if rem := size - l<<b.blkbits; rem < uint64(n) {
			n = int(rem)
		}
		buf := b.scratch[:n]
		if m, err := io.ReadFull(r, buf); err != nil {
			return shortData(done+int64(m), size, err)
		}
		done += int64(n)
		if bytes.Equal(buf, zeroBlock[:n]) {
			continue
		}
		if b.outBlk >= 1<<32-1 {
			return errors.New("image would exceed 2^32 blocks")
		}
		if k := len(ino.chunks) - 1; k >= 0 {
			c := &ino.chunks[k]
			if c.lblk+c.count == l && uint64(c.pblk)+c.count == b.outBlk {
				c.count++
				goto write
			}
		}
		ino.chunks = append(ino.chunks, chunkRun{lblk: l, count: 1, pblk: uint32(b.outBlk)})
	write:
		if err := b.writeBlock(buf); err != nil {
			return err
		}
	}
	ino.layout = LayoutChunkBased
	b.chunked = true
	return nil
}

func shortData(got int64, want uint64, err error) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("data ends after %d of %d bytes: %w", got, want, err)
}
