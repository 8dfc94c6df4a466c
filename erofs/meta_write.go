package erofs

import (
	"fmt"
	"slices"
)

// writeMeta writes the meta area: inode records at their planned
// positions, in position order, zero-filling the gaps.
func (b *Builder) writeMeta(order []*inode, shared *sharedXattrs) error {
	byPos := slices.Clone(order)
	slices.SortFunc(byPos, func(x, y *inode) int {
		switch {
		case x.pos < y.pos:
			return -1
		case x.pos > y.pos:
			return 1
		}
		return 0
	})
	var cur uint64 // bytes written into the meta area
	var rec []byte
	dirBuf := make([]byte, b.bs)
	for _, ino := range byPos {
		if err := b.writeZeros(ino.pos - cur); err != nil {
			return err
		}
		var err error
		rec, err = b.encodeRecord(rec[:0], ino, shared, dirBuf)
		if err != nil {
			return err
		}
		if _, err := b.out.Write(rec); err != nil {
			return err
		}
		cur = ino.pos + uint64(len(rec))
	}
	return b.padBlock(cur)
}

// encodeRecord appends the whole on-disk record of one inode: core, xattr
// area, chunk map and inline data.
func (b *Builder) encodeRecord(dst []byte, ino *inode, shared *sharedXattrs, dirBuf []byte) ([]byte, error) {
	m := &ino.meta
	core := inodeCore{
		Compact:    m.compact,
		Layout:     ino.layout,
		XattrCount: m.icount,
		Mode:       uint16(ino.mode),
		Nlink:      ino.nlink,
		Size:       ino.size,
		Ino:        m.ino32,
		Uid:        ino.uid,
		Gid:        ino.gid,
		Mtime:      ino.mtime,
		MtimeNsec:  ino.nsec,
	}
	switch ino.mode & S_IFMT {
	case S_IFREG:
		switch ino.layout {
		case LayoutChunkBased:
			core.U = uint32(ino.chunkBits) // chunk = block << bits
			if ino.chunkUnit() == 8 {
				core.U |= uint32(ChunkFormatIndexes)
			}
		case LayoutCompressedFull, LayoutCompressedCompact:
			core.U = ino.z.blocks // i_blocks for stat
		default:
			if ino.size > 0 {
				core.U = ino.startBlk
			}
		}
	case S_IFDIR, S_IFLNK:
		core.U = NullAddr
		if m.lateBlks > 0 {
			core.U = uint32(m.lateBlk)
		}
	case S_IFCHR, S_IFBLK:
		core.U = ino.rdev
	}
	start := len(dst)
	dst = append(dst, make([]byte, core.size())...)
	core.marshal(dst[start:])
	dst = shared.appendArea(dst, ino)
	if m.zsize > 0 {
		dst = append(dst, make([]byte, m.zpad)...)
		var err error
		if dst, err = b.appendZIndex(dst, ino, ino.pos+uint64(len(dst)-start)); err != nil {
			return nil, err
		}
	}
	if ino.layout == LayoutChunkBased {
		dst = append(dst, make([]byte, m.tpad)...)
		dst = appendChunkTable(dst, ino)
	}
	if m.inlineLen > 0 {
		switch ino.mode & S_IFMT {
		case S_IFREG:
			n := len(dst)
			dst = append(dst, make([]byte, m.inlineLen)...)
			ref := ino.tail
			if ino.z != nil {
				ref = ino.z.inline
			}
			if err := b.spool.readAt(dst[n:], ref.off); err != nil {
				return nil, fmt.Errorf("tail spool: %w", err)
			}
		case S_IFLNK:
			dst = append(dst, ino.target...)
		case S_IFDIR:
			var last []byte
			encodeDirBlocks(m.dirents, b.bs, dirBuf, func(blk []byte) error {
				last = blk
				return nil
			})
			dst = append(dst, last...)
		}
	}
	if got := len(dst) - start; got != m.recordSize() {
		return nil, fmt.Errorf("internal: inode record of %d bytes, planned %d", got, m.recordSize())
	}
	return dst, nil
}

// appendChunkTable appends one entry per chunk: a 4-byte block map entry
// (its first block, or NullAddr for a hole), or an 8-byte chunk index
// that also names the device.
func appendChunkTable(dst []byte, ino *inode) []byte {
	unit := ino.chunkUnit()
	put := func(dev uint16, blk uint32) {
		if unit == 4 {
			dst = le.AppendUint32(dst, blk)
			return
		}
		dst = le.AppendUint16(dst, 0) // startblk_hi (48-bit layouts only)
		dst = le.AppendUint16(dst, dev)
		dst = le.AppendUint32(dst, blk)
	}
	var l uint64
	for _, c := range ino.chunks {
		for ; l < c.lblk; l++ {
			put(0, NullAddr)
		}
		for i := uint64(0); i < c.count; i++ {
			put(c.dev, c.pblk+uint32(i)<<ino.chunkBits)
		}
		l = c.lblk + c.count
	}
	for ; l < ino.nchunks; l++ {
		put(0, NullAddr)
	}
	return dst
}

// chunkUnit is the size of a chunk-based file's index entries: 8 when a
// chunk lives on an extra device, else the 4-byte block map.
func (ino *inode) chunkUnit() int {
	for _, c := range ino.chunks {
		if c.dev != 0 {
			return 8
		}
	}
	return 4
}

// writeLate writes the data blocks planned in Finish: directory blocks that
// are not inline and symlink targets too long to be inline.
func (b *Builder) writeLate(order []*inode) error {
	buf := make([]byte, b.bs)
	for _, ino := range order {
		m := &ino.meta
		if m.lateBlks == 0 {
			continue
		}
		if b.outBlk != m.lateBlk {
			return fmt.Errorf("internal: late block %d written at %d", m.lateBlk, b.outBlk)
		}
		switch ino.mode & S_IFMT {
		case S_IFLNK:
			if err := b.writePadded([]byte(ino.target)); err != nil {
				return err
			}
		case S_IFDIR:
			left := m.lateBlks
			err := encodeDirBlocks(m.dirents, b.bs, buf, func(blk []byte) error {
				if left == 0 {
					return nil // the inline tail
				}
				left--
				return b.writePadded(blk)
			})
			if err != nil {
				return err
			}
		}
	}
	return nil
}
