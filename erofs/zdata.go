package erofs

import (
	"bufio"
	"fmt"
	"io"
	"os"
)

// Compressed files (erofs-format.md §7). A file is cut into extents as its
// data streams in: each call of the compressor fills one pcluster with as
// much input as fits, and the extent is that input. An extent whose
// pcluster would save no block is stored plain (one block of input in one
// block). The last extent of a file may instead be packed inline after the
// inode (TailPacking) or into the packed inode (Fragments).

// Extent kinds.
const (
	zPlain      = iota // uncompressed, one block, shifted
	zCompressed        // a right-aligned stream in blocks whole blocks
	zInline            // the last extent, inline after the index (ztailpacking)
	zFragment          // the last extent, bytes of the packed inode
)

// zextent is one extent of a compressed file. Extents are consecutive in
// the file and the file's own pclusters consecutive on disk, so offsets
// and addresses follow from the lengths; an extent that uses an earlier
// pcluster (extent dedupe) says where it is.
type zextent struct {
	length uint32 // decompressed bytes
	blocks uint16 // physical blocks (plain and compressed)
	kind   uint8
	share  uint8  // zShareFull, zSharePartial: the pcluster at pblk is another's; zOwnPartial
	pblk   uint32 // shared: the pcluster's first block
}

// extentsFor is the room made for the extents of a file of size bytes
// before its first is recorded: one per block, the most it can have (all
// plain) but for a fragment and an inline tail, up to maxExtentsAtOnce.
// Grown by append instead, the list of a big file that does not compress
// (one plain extent per block) is allocated again and again, and that
// garbage makes the GC run: more time and more peak RSS.
func extentsFor(size uint64, blkbits uint) int {
	return int(min(size>>blkbits+2, maxExtentsAtOnce))
}

// maxExtentsAtOnce bounds what extentsFor makes at once (in extents).
const maxExtentsAtOnce = 1 << 17

// presizeExtents is the file size from which the extent list is made with
// extentsFor: below it, append reallocates a few times at most, and the
// room left over by the trim in zDone would be more garbage than append
// makes (docs/performance.md has the figures).
const presizeExtents = 1 << 20

// Extents of extent dedupe: the whole of an earlier pcluster's data, or a
// prefix of it (PARTIAL_REF); or a prefix of the file's own pcluster, cut
// short where a run of shared extents starts.
const (
	zShareFull = 1 + iota
	zSharePartial
	zOwnPartial
)

// zfile is what Finish needs to write a compressed file's index.
type zfile struct {
	// Fields are ordered by size, so that the struct has no padding: one
	// per compressed file stays in memory until Finish.
	extents []zextent
	inline  tailRef // zInline: the stored bytes, in the tail spool
	fragOff uint64  // zFragment: offset in the packed inode
	shared  int     // extents in earlier pclusters (the index must be FULL)
	blocks  uint32  // physical blocks of all pclusters
	plainIn bool    // zInline: the inline extent is stored uncompressed
	big     bool    // pclusters may exceed one block (CBLKCNT)
}

// zwriter holds the buffers of compression, reused for every file.
type zwriter struct {
	c         *Compression
	comp      compressor // for the config record; workers have their own
	pcluster  int        // bytes
	maxExtent int
	big       bool
	used      bool // some file is compressed
	usedBig   bool // some pcluster is larger than a block
	inlined   bool // some file has an inline compressed tail
	packed    *tailSpool
	packing   bool // the packed inode is being written (it is not deduped)
	packedLen uint64
	dd        *zdedupe // extent dedupe, if on
}

func newZwriter(c *Compression, bs int) (*zwriter, error) {
	comp, err := c.newCompressor()
	if err != nil {
		return nil, err
	}
	z := &zwriter{c: c, comp: comp, pcluster: c.PclusterSize, maxExtent: c.MaxExtent}
	if z.pcluster == 0 {
		z.pcluster = bs
	}
	if z.maxExtent == 0 {
		z.maxExtent = max(DefaultMaxExtent, z.pcluster)
	}
	z.big = z.pcluster > bs
	return z, nil
}

// flatTail ends a file whose every extent was stored plain: the blocks
// written so far are exactly its data, so it becomes FLAT_PLAIN (or
// FLAT_INLINE with this tail next to the inode).
func (b *Builder) flatTail(ino *inode, tail []byte, inline bool) error {
	ino.layout = LayoutFlatPlain
	if len(tail) < b.bs && inline {
		ref, err := b.spoolTail(tail)
		if err != nil {
			return err
		}
		ino.tail = ref
		ino.layout = LayoutFlatInline
		if uint64(b.outBlk) == uint64(ino.startBlk) {
			ino.startBlk = NullAddr
		}
		return nil
	}
	return b.writePadded(tail)
}

func (b *Builder) zDone(ino *inode, zf *zfile) error {
	if n := len(zf.extents); ino.size >= presizeExtents && cap(zf.extents)-n > n/4+4 {
		// Sized for the worst case (extentsFor): keep what is used, as
		// the extents stay until the metadata is written. (A list grown
		// by append has its spare room too, but copying every small
		// file's would cost more than it saves.)
		zf.extents = append([]zextent(nil), zf.extents...)
	}
	ino.z = zf
	ino.layout = b.zLayout(zf)
	b.z.used = true
	if zf.blocks == 0 {
		ino.startBlk = 0
	}
	return nil
}

// zLayout picks the index form: COMPACT where the kernel reads it (4 KiB
// lclusters, fragment offsets below 4 GiB), FULL otherwise.
func (b *Builder) zLayout(zf *zfile) uint8 {
	// COMPACT derives pcluster addresses by counting: shared ones need FULL.
	if b.blkbits != 12 || zf.fragOff >= 1<<32 || b.opt.Compression.FullIndexes || zf.shared > 0 {
		return LayoutCompressedFull
	}
	if n := len(zf.extents); n == 1 && zf.extents[0].kind == zFragment {
		return LayoutCompressedFull // whole-file fragment: header only
	}
	return LayoutCompressedCompact
}

// appendFragment adds p to the packed inode's data.
func (z *zwriter) appendFragment(b *Builder, p []byte) error {
	if z.packed == nil {
		f, err := os.CreateTemp(b.opt.TempDir, "ocierofs-packed-*")
		if err != nil {
			return err
		}
		os.Remove(f.Name())
		z.packed = &tailSpool{f: f, w: bufio.NewWriterSize(f, 256<<10)}
	}
	if _, err := z.packed.w.Write(p); err != nil {
		return fmt.Errorf("packed inode spool: %w", err)
	}
	z.packedLen += uint64(len(p))
	return nil
}

// writePacked writes the packed inode: the fragments of every file, one
// after another, compressed like a file of their own.
func (b *Builder) writePacked() (*inode, error) {
	z := b.z
	if err := z.packed.w.Flush(); err != nil {
		return nil, fmt.Errorf("packed inode spool: %w", err)
	}
	p := &inode{mode: S_IFREG | 0o600, size: z.packedLen, nlink: 1, inodeRare: &noRare}
	r := io.NewSectionReader(z.packed.f, 0, int64(z.packedLen))
	z.packing = true
	if err := b.writeCompressed("(packed inode)", p, r, false); err != nil {
		return nil, fmt.Errorf("packed inode: %w", err)
	}
	if err := b.zp.drain(b); err != nil {
		return nil, err
	}
	b.packed = p
	return p, nil
}
