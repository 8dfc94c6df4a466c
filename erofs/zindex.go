package erofs

import (
	"fmt"
	"slices"
)

// Lcluster index types (erofs-format.md §7.2).
const (
	lclusterPlain   = 0
	lclusterHead1   = 1
	lclusterNonhead = 2
	lclusterHead2   = 3
)

// Map header h_advise bits.
const (
	zAdviseCompacted2B    = 0x0001
	zAdviseBigPcluster1   = 0x0002
	zAdviseBigPcluster2   = 0x0004
	zAdviseInlinePcluster = 0x0008
	zAdviseInterlaced     = 0x0010
	zAdviseFragment       = 0x0020

	zFragmentInodeBit = 7 // of h_clusterbits: the whole file is a fragment

	zPartialRef = 0x8000 // di_advise of a FULL HEAD: the extent is a prefix of its pcluster

	cblkcnt  = 0x0800 // NONHEAD delta[0] holds a pcluster's block count
	maxDelta = 0x07FF // delta values stay clear of cblkcnt
)

// lcluster is one logical cluster's index record before encoding.
type lcluster struct {
	typ        uint8
	real       bool   // a HEAD whose pcluster is on disk (pblk is true)
	partial    bool   // a HEAD that uses a prefix of its pcluster (PARTIAL_REF)
	clusterofs uint16 // HEAD: where in this lcluster the extent starts
	pblk       uint32 // HEAD: first block of its pcluster
	d0, d1     uint16 // NONHEAD: distance back to the HEAD (or cblkcnt|n), forward to the next
}

// lclusters lays the extents of a file of size bytes over its lclusters
// (one per block): a HEAD where an extent starts, NONHEADs in between, and
// a PLAIN terminator in the last lcluster when the last extent started
// before it and the file ends inside it, so that the kernel's extent end is
// exactly i_size. The records go to out's memory when it is large enough.
func (b *Builder) lclusters(ino *inode, out []lcluster) []lcluster {
	zf := ino.z
	bits := b.blkbits
	mask := uint64(b.bs - 1)
	total := int((ino.size + mask) >> bits)
	out = slices.Grow(out[:0], total)[:total]
	clear(out)
	heads := make([]int, 0, len(zf.extents)+1)
	var pos uint64
	pblk := ino.startBlk
	for _, e := range zf.extents {
		h := int(pos >> bits)
		l := lcluster{typ: lclusterHead1, clusterofs: uint16(pos & mask)}
		switch e.kind {
		case zPlain:
			l.typ, l.real, l.pblk = lclusterPlain, true, pblk
		case zCompressed:
			l.real, l.pblk = true, pblk
		case zInline:
			if zf.plainIn {
				l.typ = lclusterPlain
			}
		case zFragment:
			l.pblk = uint32(zf.fragOff >> 32) // FULL: the high half of the offset
		}
		switch e.share {
		case zShareFull, zSharePartial:
			l.pblk, l.partial = e.pblk, e.share == zSharePartial
		default:
			l.partial = e.share == zOwnPartial
			pblk += uint32(e.blocks)
		}
		out[h] = l
		heads = append(heads, h)
		pos += uint64(e.length)
	}
	if last := total - 1; ino.size&mask != 0 && heads[len(heads)-1] != last {
		out[last] = lcluster{typ: lclusterPlain, clusterofs: uint16(ino.size & mask)}
		heads = append(heads, last)
	}
	for i, h := range heads {
		next := total
		if i+1 < len(heads) {
			next = heads[i+1]
		}
		for lcn := h + 1; lcn < next; lcn++ {
			l := lcluster{typ: lclusterNonhead,
				d0: uint16(min(lcn-h, maxDelta)), d1: uint16(min(next-lcn, maxDelta))}
			if lcn == h+1 && zf.big {
				// The kernel wants the block count after every compressed
				// HEAD, and reads it when walking back over the pack.
				n := uint16(1)
				if i < len(zf.extents) && zf.extents[i].kind == zCompressed {
					n = zf.extents[i].blocks
				}
				l.d0 = cblkcnt | n
			}
			out[lcn] = l
		}
	}
	return out
}

// zAdvise is the map header's h_advise of a compressed inode.
func (b *Builder) zAdvise(ino *inode) uint16 {
	zf := ino.z
	var a uint16
	if ino.layout == LayoutCompressedCompact && b.blkbits == 12 {
		a |= zAdviseCompacted2B
	}
	if zf.big {
		a |= zAdviseBigPcluster1
		if ino.layout == LayoutCompressedCompact {
			a |= zAdviseBigPcluster2
		}
	}
	switch zf.extents[len(zf.extents)-1].kind {
	case zInline:
		a |= zAdviseInlinePcluster
	case zFragment:
		a |= zAdviseFragment
	}
	return a
}

// wholeFragment reports a file that is all one fragment: its map header is
// the fragment offset and nothing follows.
func (zf *zfile) wholeFragment() bool {
	return len(zf.extents) == 1 && zf.extents[0].kind == zFragment
}

// zIndexSize is the size of the map header and index area of a compressed
// inode whose map header starts at byte h of the meta area (8-aligned).
func (b *Builder) zIndexSize(ino *inode, h uint64) int {
	if ino.z.wholeFragment() {
		return 16
	}
	total := int((ino.size + uint64(b.bs) - 1) >> b.blkbits)
	if ino.layout == LayoutCompressedFull {
		return 16 + 8*total
	}
	initial, n2b := compactSplit(h+8, total, b.zAdvise(ino)&zAdviseCompacted2B != 0)
	rest := total - initial - n2b
	if initial >= total {
		initial, rest = total, 0
	}
	n4 := initial + rest
	return 8 + 4*(n4+n4%2) + 2*n2b
}

// compactSplit is how the kernel splits the entries of a COMPACT index
// starting at ebase: initial entries in 4-byte packs until the 2-byte packs
// can start 32-byte aligned, n2b entries in 2-byte packs, the rest in 4-byte
// packs.
func compactSplit(ebase uint64, total int, use2B bool) (initial, n2b int) {
	initial = int((32-ebase%32)/4) & 7
	if use2B && initial < total {
		n2b = (total - initial) / 16 * 16
	}
	return initial, n2b
}

// appendZIndex appends the map header and the index of a compressed inode
// whose header lands at meta-area byte h. scratch keeps the memory of the
// lcluster records from one file to the next.
func (b *Builder) appendZIndex(dst []byte, ino *inode, h uint64, scratch *[]lcluster) ([]byte, error) {
	zf := ino.z
	if zf.wholeFragment() {
		dst = le.AppendUint64(dst, zf.fragOff|1<<63)
		return append(dst, make([]byte, 8)...), nil
	}
	var hdr [8]byte
	switch zf.extents[len(zf.extents)-1].kind {
	case zInline:
		le.PutUint16(hdr[2:], uint16(zf.inline.n()))
	case zFragment:
		le.PutUint32(hdr[0:], uint32(zf.fragOff))
	}
	le.PutUint16(hdr[4:], b.zAdvise(ino))
	hdr[6] = byte(b.z.c.Algorithm)
	dst = append(dst, hdr[:]...)
	lcs := b.lclusters(ino, *scratch)
	*scratch = lcs
	if ino.layout == LayoutCompressedFull {
		dst = append(dst, make([]byte, 8)...)
		for _, l := range lcs {
			var r [8]byte
			adv := uint16(l.typ)
			if l.partial {
				adv |= zPartialRef
			}
			le.PutUint16(r[0:], adv)
			if l.typ == lclusterNonhead {
				le.PutUint16(r[4:], l.d0)
				le.PutUint16(r[6:], l.d1)
			} else {
				le.PutUint16(r[2:], l.clusterofs)
				le.PutUint32(r[4:], l.pblk)
			}
			dst = append(dst, r[:]...)
		}
		return dst, nil
	}
	total := len(lcs)
	initial, n2b := compactSplit(h+8, total, b.zAdvise(ino)&zAdviseCompacted2B != 0)
	if initial > total {
		initial = total
	}
	var err error
	emit := func(group []lcluster, vcnt int) {
		for i := 0; i < len(group) && err == nil; i += vcnt {
			pack := group[i:min(i+vcnt, len(group))]
			dst, err = b.appendPack(dst, pack, vcnt, zf.big)
		}
	}
	emit(lcs[:initial], 2)
	emit(lcs[initial:initial+n2b], 16)
	emit(lcs[initial+n2b:], 2)
	return dst, err
}

// appendPack encodes one COMPACT pack of vcnt entries (a short final pack
// is padded with zero entries) and its blkaddr trailer.
func (b *Builder) appendPack(dst []byte, pack []lcluster, vcnt int, big bool) ([]byte, error) {
	size := 8
	if vcnt == 16 {
		size = 32
	}
	start := len(dst)
	dst = append(dst, make([]byte, size)...)
	p := dst[start:]
	encodebits := (size - 4) * 8 / vcnt
	for i, l := range pack {
		lo := uint32(l.clusterofs)
		if l.typ == lclusterNonhead {
			lo = uint32(l.d0)
			if i == vcnt-1 && l.d0&cblkcnt == 0 {
				lo = uint32(l.d1) // the last entry of a pack holds delta[1]
			}
		}
		v := lo | uint32(l.typ)<<b.blkbits
		bit := i * encodebits
		cur := le.Uint32(p[bit/8:])
		le.PutUint32(p[bit/8:], cur|v<<(bit&7))
	}
	// The trailer is what makes the kernel's count land on the true block
	// of the first pcluster that starts in the pack.
	var trailer uint32
	for i, l := range pack {
		if l.real {
			n, err := packBlocks(p, i, vcnt, b.blkbits, big)
			if err != nil {
				return nil, err
			}
			trailer = l.pblk - n
			break
		}
	}
	le.PutUint32(p[size-4:], trailer)
	return dst, nil
}

// compactEntry decodes entry i of a COMPACT pack.
func compactEntry(p []byte, i, vcnt int, lbits uint) (lo uint32, typ uint8) {
	encodebits := (len(p) - 4) * 8 / vcnt
	bit := i * encodebits
	v := le.Uint32(p[bit/8:]) >> (bit & 7)
	return v & (1<<lbits - 1), uint8(v>>lbits) & 3
}

// packBlocks is the kernel's count of blocks that precede the HEAD at
// entry i of a pack, from the pack's trailer on.
func packBlocks(p []byte, i, vcnt int, lbits uint, big bool) (uint32, error) {
	var n uint32
	if !big {
		n = 1
		for i > 0 {
			i--
			lo, typ := compactEntry(p, i, vcnt, lbits)
			if typ == lclusterNonhead {
				i -= int(lo)
			}
			if i >= 0 {
				n++
			}
		}
		return n, nil
	}
	for i > 0 {
		i--
		lo, typ := compactEntry(p, i, vcnt, lbits)
		if typ != lclusterNonhead {
			n++
			continue
		}
		if lo&cblkcnt != 0 {
			i--
			n += lo &^ cblkcnt
			continue
		}
		if lo <= 1 {
			return 0, fmt.Errorf("compact index: NONHEAD with delta %d in a big-pcluster pack", lo)
		}
		i -= int(lo) - 2
	}
	return n, nil
}
