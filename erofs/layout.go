package erofs

import (
	"errors"
	"fmt"
)

// metaPlan is where Finish puts an inode and what its record holds.
// Every inode holds one: fields are as narrow as their values (a record's
// parts are under a block, block addresses are 32-bit in EROFS).
type metaPlan struct {
	tableSize int32  // chunk map bytes after the xattrs
	ino32     uint32 // i_ino
	zsize     int32  // compressed: zpad, map header and index
	lateBlk   uint32 // dirs and symlinks: first block in the late area
	lateBlks  uint32 // number of late blocks
	inlineLen uint16 // inline tail bytes after core, xattrs and table (under a block)
	icount    uint16 // i_xattr_icount: it gives the xattr area's size
	tpad      uint8  // zeros that align an 8-byte chunk index
	zpad      uint8  // compressed: zeros that align the map header to 8
	compact   bool
}

// xsize is the size of the inline xattr area: a header and icount-1
// 4-byte units.
func (m *metaPlan) xsize() int {
	if m.icount == 0 {
		return 0
	}
	return xattrIbodyHeaderSize + 4*(int(m.icount)-1)
}

func (m *metaPlan) recordSize() int {
	n := CompactInodeSize
	if !m.compact {
		n = ExtendedInodeSize
	}
	return n + m.xsize() + int(m.zsize) + int(m.tpad) + int(m.tableSize) + int(m.inlineLen)
}

// Finish lays out the metadata after the data and writes the superblock.
// The Builder cannot be used afterwards.
func (b *Builder) Finish() error {
	if b.err != nil {
		return b.err
	}
	if b.finished {
		return errors.New("erofs: Finish called twice")
	}
	b.finished = true
	defer b.Close()
	if err := b.finish(); err != nil {
		return b.fail(fmt.Errorf("erofs: finish: %w", err))
	}
	return nil
}

// testHookMeta, if set (by tests), runs before the metadata is laid out.
var testHookMeta func(*Builder)

// finish writes what follows the file data, in named stages: the last
// data (the pipeline's, the packed fragments), each inode's record size
// and layout, their placement, the metadata and late blocks, and the
// superblock.
func (b *Builder) finish() error {
	order, epoch, err := b.finishData()
	if err != nil {
		return err
	}
	shared := &sharedXattrs{bs: b.bs, count: map[string]int{}, id: map[string]uint32{}}
	for _, ino := range order {
		shared.countInode(ino)
	}
	for _, ino := range order {
		shared.assign(ino)
	}
	for i, ino := range order {
		if err := b.sizeInode(ino, i, shared, epoch); err != nil {
			return err
		}
	}
	pl, err := b.planMeta(order, shared)
	if err != nil {
		return err
	}
	if err := b.writeMetaArea(order, shared, pl); err != nil {
		return err
	}
	return b.writeSuper(order, shared, pl, epoch)
}

// epoch is the image's base time, which compact inodes share.
type epoch struct {
	sec  int64
	nsec uint32
}

// finishData writes the last file data (the pipeline's, then the packed
// inode of fragments), frees the pipeline and returns every inode in
// order, root first, with the image's epoch.
func (b *Builder) finishData() ([]*inode, epoch, error) {
	if b.zp != nil {
		if err := b.zp.drain(b); err != nil {
			return nil, epoch{}, err
		}
	}
	order, err := b.collect()
	if err != nil {
		return nil, epoch{}, err
	}
	if err := noRareWritten(); err != nil {
		return nil, epoch{}, err
	}
	var ep epoch
	ep.sec, ep.nsec = b.chooseEpoch(order)
	if b.z != nil && b.z.packed != nil {
		// The fragments are data too: the packed inode's pclusters go
		// after every file's, before the metadata.
		p, err := b.writePacked()
		if err != nil {
			return nil, epoch{}, err
		}
		p.mtime, p.nsec = ep.sec, ep.nsec
		order = append(order, p)
	}
	if b.zp != nil {
		// Every file's data is out (its last bytes once the output is
		// flushed, as it may read them from the ring): the pipeline's
		// memory, its ring and a compressor per worker, goes before the
		// metadata is laid out, which allocates about as much again.
		if err := b.out.Flush(); err != nil {
			return nil, epoch{}, err
		}
		b.zp.stop()
	}
	if testHookMeta != nil {
		testHookMeta(b)
	}
	return order, ep, nil
}

// sizeInode decides the form of inode i's record (compact where it can
// be), its xattr area, and its layout: how much of its data goes inline
// after the record and how many late blocks it takes.
func (b *Builder) sizeInode(ino *inode, i int, shared *sharedXattrs, ep epoch) error {
	bs := b.bs
	m := &ino.meta
	m.ino32 = uint32(i + 1)
	m.compact = !b.opt.ExtendedInodes && ino.mtime == ep.sec && ino.nsec == ep.nsec &&
		ino.size <= 0xFFFFFFFF && ino.uid <= 0xFFFF && ino.gid <= 0xFFFF && ino.nlink <= 0xFFFF
	xsize, icount := shared.area(ino)
	if m.icount = icount; m.xsize() != xsize {
		return fmt.Errorf("an inode's xattrs take %d bytes: EROFS's limit is %d", xsize, xattrIbodyHeaderSize+4*0xFFFE)
	}
	if ino.layout == LayoutChunkBased {
		unit := ino.chunkUnit()
		m.tpad = uint8((unit - m.recordSize()%unit) % unit)
		if ino.nchunks > (1<<31-1)/uint64(unit) {
			return fmt.Errorf("a chunk-based file of %d chunks: its chunk map exceeds 2 GiB (use larger chunks)", ino.nchunks)
		}
		m.tableSize = int32(unit * int(ino.nchunks))
	}
	base := m.recordSize()
	switch ino.mode & S_IFMT {
	case S_IFREG:
		switch ino.layout {
		case LayoutFlatInline:
			m.inlineLen = uint16(ino.tail.n())
		case LayoutCompressedFull, LayoutCompressedCompact:
			// The map header sits at the first 8-aligned byte after
			// the xattrs; records start 32-aligned, so its place in a
			// 32-byte line (which shapes a COMPACT index) is known now.
			h := (base + 7) &^ 7
			m.zpad = uint8(h - base)
			m.zsize = int32(h - base + b.zIndexSize(ino, uint64(h)))
			if zf := ino.z; zf.extents[len(zf.extents)-1].kind == zInline {
				m.inlineLen = uint16(zf.inline.n())
			}
		}
	case S_IFDIR:
		size := dirSize(b.dirents[ino], bs)
		ino.size = size
		tail := int(size % uint64(bs))
		m.lateBlks = uint32(size / uint64(bs))
		ino.layout = LayoutFlatPlain
		if tail > 0 && base+tail <= bs {
			ino.layout = LayoutFlatInline
			m.inlineLen = uint16(tail)
		} else if tail > 0 {
			m.lateBlks++
		}
	case S_IFLNK:
		ino.layout = LayoutFlatPlain
		if base+len(ino.target) <= bs {
			ino.layout = LayoutFlatInline
			m.inlineLen = uint16(len(ino.target))
		} else {
			// Long targets (blocks smaller than 4 KiB) take several blocks.
			m.lateBlks = uint32((len(ino.target) + bs - 1) >> b.blkbits)
		}
	default:
		ino.layout = LayoutFlatPlain
	}
	return nil
}

// areas is where the metadata goes: the shared xattr table at tableBlk,
// the inode area (metaBlks blocks) at metaStart, late blocks up to late,
// the image's end.
type areas struct {
	tableBlk, metaStart, late uint64
	metaBlks                  uint64
}

// planMeta places the inode records and gives each inode its late
// blocks. nid 0 is never used, so the root (placed first) gets nid 1 and
// its nid fits the superblock's 16 bits. The shared xattr table comes
// first, so that readers which fetch a whole block from an xattr's
// position (go-erofs) never run past the end of the image; then the inode
// area; then the late data.
func (b *Builder) planMeta(order []*inode, shared *sharedXattrs) (areas, error) {
	var pl areas
	metaBlks, err := b.place(order)
	if err != nil {
		return pl, err
	}
	pl.metaBlks = uint64(metaBlks)
	pl.tableBlk = b.outBlk
	pl.metaStart = pl.tableBlk + (uint64(len(shared.table))+uint64(b.bs)-1)>>b.blkbits
	if order[0].nid() == 0 || order[0].nid() > 0xFFFF {
		return pl, fmt.Errorf("root nid %d does not fit 16 bits", order[0].nid())
	}
	pl.late = pl.metaStart + pl.metaBlks
	for _, ino := range order {
		if ino.meta.lateBlks > 0 {
			ino.meta.lateBlk = uint32(pl.late) // checked below: an error if it wrapped
			pl.late += uint64(ino.meta.lateBlks)
		}
	}
	if pl.late >= 1<<32 {
		return pl, errors.New("image exceeds 2^32 blocks")
	}
	return pl, nil
}

// writeMetaArea writes the shared xattr table, the inode area and the late
// blocks as planned, and finishes the data and blob writers.
func (b *Builder) writeMetaArea(order []*inode, shared *sharedXattrs, pl areas) error {
	if len(shared.table) > 0 {
		if err := b.writePadded(shared.table); err != nil {
			return err
		}
	}
	if err := b.writeMeta(order, shared, pl.metaBlks); err != nil {
		return err
	}
	if err := b.writeLate(order); err != nil {
		return err
	}
	if b.outBlk != pl.late {
		return fmt.Errorf("internal: wrote %d blocks, planned %d", b.outBlk, pl.late)
	}
	// Duplicate data written past the end, then rewound over, is cut.
	if err := b.blockWriter.finish(); err != nil {
		return err
	}
	if b.blob != nil {
		if err := b.blob.finish(); err != nil {
			return fmt.Errorf("blob: %w", err)
		}
		b.opt.Devices[0].Blocks = b.blob.outBlk
	}
	return nil
}

// writeSuper writes the image's first block: the superblock, the
// compression config records and the device table.
func (b *Builder) writeSuper(order []*inode, shared *sharedXattrs, pl areas, ep epoch) error {
	bs := b.bs
	sb := superBlock{
		Magic:         SuperMagic,
		FeatureCompat: FeatureCompatSBChksum | FeatureCompatMtime,
		BlkSzBits:     uint8(b.blkbits),
		RootNid:       uint16(order[0].nid()),
		Inos:          uint64(len(order)),
		Epoch:         uint64(ep.sec),
		FixedNsec:     ep.nsec,
		Blocks:        uint32(pl.late),
		MetaBlkAddr:   uint32(pl.metaStart),
		UUID:          b.opt.UUID,
	}
	if len(shared.table) > 0 {
		sb.XattrBlkAddr = uint32(pl.tableBlk)
	}
	if b.chunked {
		sb.FeatureIncompat |= FeatureIncompatChunkedFile
	}
	cfgs := b.compressionFeatures(&sb)
	if bt := b.opt.BuildTime; !bt.IsZero() {
		if d := bt.Unix() - ep.sec; d >= 0 && d < 1<<32 {
			sb.BuildTime = uint32(d)
		}
	}
	copy(sb.VolumeName[:], b.opt.VolumeName)
	head := make([]byte, b.firstBlk()*uint64(bs))
	if devs := b.opt.Devices; len(devs) > 0 {
		sb.FeatureIncompat |= FeatureIncompatDeviceTable
		sb.ExtraDevices = uint16(len(devs))
		sb.DevtSlotOff = uint16(b.devtOff() / deviceSlotSize)
		if len(cfgs) > b.devtOff()-SuperOffset-SuperSize {
			return errors.New("internal: compression config records overlap the device table")
		}
		// Each device's unified address is where it would begin if the
		// devices followed the image in order: then the image and its
		// devices concatenated mount as they are (flat mode, Linux 6.4+).
		uni := pl.late
		for i, d := range devs {
			slot := head[b.devtOff()+i*deviceSlotSize:]
			copy(slot[:deviceTagSize], d.Tag)
			le.PutUint32(slot[64:], uint32(d.Blocks))
			le.PutUint32(slot[68:], uint32(uni))
			uni += d.Blocks
			if uni >= 1<<32 {
				return errors.New("the image and its devices exceed 2^32 blocks")
			}
		}
	}
	sb.marshal(head[SuperOffset:])
	copy(head[SuperOffset+SuperSize:], cfgs)
	le.PutUint32(head[SuperOffset+4:], superChecksum(head, bs))
	_, err := b.w.WriteAt(head, 0)
	return err
}

// compressionFeatures sets the superblock's compression features and
// returns its config records.
func (b *Builder) compressionFeatures(sb *superBlock) []byte {
	z := b.z
	if z == nil || !z.used {
		return nil
	}
	var cfgs []byte
	sb.FeatureIncompat |= FeatureIncompatZeroPadding
	if alg := z.c.Algorithm; z.big || alg != AlgLZ4 {
		// Config records: mandatory for big pclusters and for every
		// algorithm but LZ4; u1 becomes the bitmap of algorithms.
		sb.FeatureIncompat |= FeatureIncompatComprCfgs
		sb.U1 = 1 << alg
		rec := z.comp.config(z.pcluster / b.bs)
		cfgs = le.AppendUint16(cfgs, uint16(len(rec)))
		cfgs = append(cfgs, rec...)
	}
	if z.inlined {
		sb.FeatureIncompat |= FeatureIncompatZTailPacking
	}
	if z.dd != nil && z.dd.sharedExtents > 0 {
		sb.FeatureIncompat |= FeatureIncompatFragments // the DEDUPE bit too
	}
	if b.packed != nil {
		sb.FeatureIncompat |= FeatureIncompatFragments
		sb.PackedNid = b.packed.nid()
	}
	return cfgs
}

// collect walks the tree depth-first in name order and returns each inode
// once (hard links share one), root first. It counts nlink on the way.
func (b *Builder) collect() ([]*inode, error) {
	order := make([]*inode, 0, b.ninodes+1)
	b.dirents = map[*inode][]*node{}
	var walk func(n, parent *node) error
	walk = func(n, parent *node) error {
		ino := n.ino
		// Only a file is reached more than once (hard links): it is new
		// while its link count is still 0.
		if !ino.isDir() {
			if ino.nlink == 0 {
				order = append(order, ino)
			}
			ino.nlink++
			return nil
		}
		order = append(order, ino)
		ino.nlink = 2
		ents := sortedDirents(n, parent)
		b.dirents[ino] = ents
		n.dir = nil // the dirents hold the entries now
		for _, d := range ents {
			if d.name == "." || d.name == ".." {
				continue
			}
			if d.ino.isDir() {
				ino.nlink++
			}
			if err := walk(d, n); err != nil {
				return err
			}
		}
		return nil
	}
	return order, walk(b.root, b.root)
}

// chooseEpoch picks the superblock epoch: the most common mtime, so that as
// many inodes as possible can be compact (old kernels give every compact
// inode the epoch as its mtime). Implied directories get the build time, or
// the epoch when none is set.
func (b *Builder) chooseEpoch(order []*inode) (int64, uint32) {
	type ts struct {
		sec  int64
		nsec uint32
	}
	hist := map[ts]int{}
	for _, ino := range order {
		if !ino.implied {
			hist[ts{ino.mtime, ino.nsec}]++
		}
	}
	var best ts
	bestN := 0
	for t, n := range hist {
		if n > bestN || n == bestN && (t.sec < best.sec || t.sec == best.sec && t.nsec < best.nsec) {
			best, bestN = t, n
		}
	}
	implied := best
	if bt := b.opt.BuildTime; !bt.IsZero() {
		implied = ts{bt.Unix(), uint32(bt.Nanosecond())}
		if bestN == 0 {
			best = implied
		}
	}
	for _, ino := range order {
		if ino.implied {
			ino.mtime, ino.nsec = implied.sec, implied.nsec
		}
	}
	return best.sec, best.nsec
}

// place assigns every inode record a position in the meta area and returns
// the number of blocks used. A record with inline data must not cross a
// block (the kernel refuses that); records are kept inside one block
// whenever they fit one, placed best-fit into the partly filled blocks so
// little space is lost to padding.
func (b *Builder) place(order []*inode) (uint64, error) {
	bs := uint64(b.bs)
	slots := int(bs / SlotSize)
	// buckets[k]: blocks with exactly k free slots at their end.
	buckets := make([][]uint64, slots+1)
	var nblk uint64
	open := func(used int) uint64 {
		blk := nblk
		nblk++
		if k := slots - used; k > 0 {
			buckets[k] = append(buckets[k], blk)
		}
		return blk
	}
	open(1) // slot 0: nid 0 is reserved
	for _, ino := range order {
		size := uint64(ino.meta.recordSize())
		need := int((size + SlotSize - 1) / SlotSize)
		if need > slots {
			// Larger than a block (huge xattrs or chunk map, never inline
			// data): give it fresh consecutive blocks.
			first := nblk
			nblk += uint64(need / slots)
			if err := setSlot(ino, first*bs); err != nil {
				return 0, err
			}
			if rest := need % slots; rest > 0 {
				open(rest)
			}
			continue
		}
		k := need
		for k <= slots && len(buckets[k]) == 0 {
			k++
		}
		var blk uint64
		if k > slots {
			blk = open(0)
			k = slots
			buckets[k] = buckets[k][:len(buckets[k])-1]
		} else {
			blk = buckets[k][len(buckets[k])-1]
			buckets[k] = buckets[k][:len(buckets[k])-1]
		}
		if err := setSlot(ino, blk*bs+uint64(slots-k)*SlotSize); err != nil {
			return 0, err
		}
		if left := k - need; left > 0 {
			buckets[left] = append(buckets[left], blk)
		}
	}
	return nblk, nil
}

// setSlot places ino's record at byte pos of the meta area.
func setSlot(ino *inode, pos uint64) error {
	if pos/SlotSize >= 1<<32 {
		return errors.New("the inode records exceed 128 GiB")
	}
	ino.slot = uint32(pos / SlotSize)
	return nil
}
