package erofs

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// metaRunBytes is about how much of the meta area one worker encodes and
// writes at a time.
const metaRunBytes = 256 << 10

// metaRun is a stretch of the meta area, [start, end) in bytes from its
// beginning, holding the records byPos[i:j].
type metaRun struct {
	i, j       int
	start, end uint64
}

// writeMeta writes the meta area, metaBlks blocks from the output's next
// block: inode records at their planned positions, zero-filling the gaps.
// Every position is fixed by now, so the area is cut into runs that
// workers encode and write on their own: io.WriterAt allows parallel
// WriteAt calls on disjoint ranges. The bytes do not depend on the number
// of workers.
func (b *Builder) writeMeta(order []*inode, shared *sharedXattrs, metaBlks uint64) error {
	byPos := slices.Clone(order)
	slices.SortFunc(byPos, func(x, y *inode) int { return cmp.Compare(x.slot, y.slot) })
	size := metaBlks * uint64(b.bs)
	var runs []metaRun
	for i := 0; i < len(byPos); {
		start := byPos[i].pos()
		if i == 0 {
			start = 0 // the reserved slot of nid 0, and any gap before
		}
		j := i + 1
		for j < len(byPos) && byPos[j].pos()-start < metaRunBytes {
			j++
		}
		runs = append(runs, metaRun{i: i, j: j, start: start})
		i = j
	}
	for k := range runs {
		runs[k].end = size
		if k+1 < len(runs) {
			runs[k].end = runs[k+1].start
		}
	}

	// What was buffered goes out first: the runs bypass the buffers.
	if err := b.out.Flush(); err != nil {
		return err
	}
	if b.spool != nil {
		if err := b.spool.w.Flush(); err != nil {
			return fmt.Errorf("tail spool: %w", err)
		}
	}
	base := int64(b.outBlk) * int64(b.bs)
	workers := b.opt.Workers
	if b.zp != nil {
		workers = b.zp.workers
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	// The last run goes first, alone: an output that grows as it is
	// written (a buffer in memory) then has its final size before the
	// parallel writes.
	last := len(runs) - 1
	e := &metaEncoder{b: b, shared: shared, scratch: recordScratch{dirBuf: make([]byte, b.bs)}}
	if err := e.write(byPos, runs[last], base); err != nil {
		return err
	}
	runs = runs[:last]
	workers = min(workers, len(runs))
	errs := make([]error, len(runs))
	var next atomic.Int64
	var failed atomic.Bool
	work := func(e *metaEncoder) {
		for !failed.Load() {
			k := int(next.Add(1)) - 1
			if k >= len(runs) {
				return
			}
			if errs[k] = e.write(byPos, runs[k], base); errs[k] != nil {
				failed.Store(true)
			}
		}
	}
	var wg sync.WaitGroup
	for range workers - 1 {
		wg.Go(func() { work(&metaEncoder{b: b, shared: shared, scratch: recordScratch{dirBuf: make([]byte, b.bs)}}) })
	}
	work(e)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return b.skipBlocks(metaBlks)
}

// metaEncoder encodes runs of the meta area on one worker.
type metaEncoder struct {
	b       *Builder
	shared  *sharedXattrs
	scratch recordScratch
	buf     []byte // the run
	tails   []byte // the inline tails of the run's files
	pieces  []tailPiece
	at      []int // per record of the run: where its tail is in tails, or -1
}

// tailPiece is one record's inline tail in the spool.
type tailPiece struct {
	off int64
	n   int
	rec int // index in the run
}

// write encodes the records of run r and writes them at base+r.start.
func (e *metaEncoder) write(byPos []*inode, r metaRun, base int64) error {
	recs := byPos[r.i:r.j]
	if err := e.readTails(recs); err != nil {
		return fmt.Errorf("tail spool: %w", err)
	}
	buf := slices.Grow(e.buf[:0], int(r.end-r.start))
	cur := r.start
	for k, ino := range recs {
		pos := ino.pos()
		if pos < cur {
			return fmt.Errorf("internal: inode record at %d overlaps the one before", pos)
		}
		buf = append(buf, make([]byte, pos-cur)...)
		var tail []byte
		if at := e.at[k]; at >= 0 {
			tail = e.tails[at : at+int(ino.meta.inlineLen)]
		}
		n := len(buf)
		var err error
		if buf, err = e.b.encodeRecord(buf, ino, e.shared, &e.scratch, tail); err != nil {
			return err
		}
		cur = pos + uint64(len(buf)-n)
	}
	if cur > r.end {
		return fmt.Errorf("internal: meta area of %d bytes, planned %d", cur, r.end)
	}
	buf = append(buf, make([]byte, r.end-cur)...)
	e.buf = buf
	_, err := e.b.w.WriteAt(buf, base+int64(r.start))
	return err
}

// tailGap is the largest hole between two tails in the spool that one read
// spans rather than reading each on its own.
const tailGap = 16384

// readTails reads the inline tails of the regular files among recs from
// the spool, in as few reads as their order in the spool allows: tails are
// spooled in input order, which is close to the meta area's for sorted
// layers, and one pread per tail was 44,000 calls on the Linux tree.
func (e *metaEncoder) readTails(recs []*inode) error {
	e.pieces = e.pieces[:0]
	e.at = slices.Grow(e.at[:0], len(recs))[:len(recs)]
	for k, ino := range recs {
		e.at[k] = -1
		if ino.meta.inlineLen == 0 || ino.mode&S_IFMT != S_IFREG {
			continue
		}
		ref := ino.tail
		if ino.z != nil {
			ref = ino.z.inline
		}
		e.pieces = append(e.pieces, tailPiece{off: ref.off(), n: int(ino.meta.inlineLen), rec: k})
	}
	if len(e.pieces) == 0 {
		return nil
	}
	slices.SortFunc(e.pieces, func(x, y tailPiece) int { return cmp.Compare(x.off, y.off) })
	// Cut the pieces into spans of the spool, each read at once.
	type span struct {
		off, end int64
		at       int
	}
	var spans []span
	total := 0
	for i := range e.pieces {
		p := &e.pieces[i]
		end := p.off + int64(p.n)
		if s := len(spans) - 1; s >= 0 && p.off <= spans[s].end+tailGap {
			spans[s].end = max(spans[s].end, end)
		} else {
			if s >= 0 {
				total += int(spans[s].end - spans[s].off)
			}
			spans = append(spans, span{off: p.off, end: end, at: total})
		}
		sp := spans[len(spans)-1]
		e.at[p.rec] = sp.at + int(p.off-sp.off)
	}
	last := spans[len(spans)-1]
	total += int(last.end - last.off)
	e.tails = slices.Grow(e.tails[:0], total)[:total]
	for _, sp := range spans {
		if _, err := e.b.spool.f.ReadAt(e.tails[sp.at:sp.at+int(sp.end-sp.off)], sp.off); err != nil {
			return err
		}
	}
	return nil
}

// recordScratch is the memory encodeRecord reuses from one record to the
// next, one per goroutine: a record is encoded per entry of the layer.
type recordScratch struct {
	dirBuf []byte     // one block
	lcs    []lcluster // the index records of a compressed file
}

// encodeRecord appends the whole on-disk record of one inode: core, xattr
// area, chunk map and inline data.
// tail is a regular file's inline data, read from the spool.
func (b *Builder) encodeRecord(dst []byte, ino *inode, shared *sharedXattrs, scratch *recordScratch, tail []byte) ([]byte, error) {
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
			core.U = m.lateBlk
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
		if dst, err = b.appendZIndex(dst, ino, ino.pos()+uint64(len(dst)-start), &scratch.lcs); err != nil {
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
			if len(tail) != int(m.inlineLen) {
				return nil, fmt.Errorf("internal: inline tail of %d bytes, planned %d", len(tail), m.inlineLen)
			}
			dst = append(dst, tail...)
		case S_IFLNK:
			dst = append(dst, ino.target...)
		case S_IFDIR:
			var last []byte
			encodeDirBlocks(b.dirents[ino], b.bs, scratch.dirBuf, func(blk []byte) error {
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
		if b.outBlk != uint64(m.lateBlk) {
			return fmt.Errorf("internal: late block %d written at %d", m.lateBlk, b.outBlk)
		}
		switch ino.mode & S_IFMT {
		case S_IFLNK:
			if err := b.writePadded([]byte(ino.target)); err != nil {
				return err
			}
		case S_IFDIR:
			left := m.lateBlks
			err := encodeDirBlocks(b.dirents[ino], b.bs, buf, func(blk []byte) error {
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
