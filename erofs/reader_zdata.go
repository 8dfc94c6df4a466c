package erofs

import (
	"errors"
	"fmt"
	"io"
	"sync"

	kzstd "github.com/klauspost/compress/zstd"

	"github.com/ocierofs/ocierofs/erofs/compress/deflate"
	"github.com/ocierofs/ocierofs/erofs/compress/lz4"
	"github.com/ocierofs/ocierofs/erofs/compress/zstd"
)

// Reading compressed files (layouts COMPRESSED_FULL and COMPRESSED_COMPACT).
// The mapping from a logical offset to its extent follows the kernel's
// z_erofs_map_blocks step by step, so an image this reader maps the way the
// writer meant is one the kernel maps that way too; decoding is strict: a
// pcluster must decode to exactly its extent.

// maxDecodedExtent bounds the decompressed size of one extent this reader
// accepts (a forged index cannot make it allocate more).
const maxDecodedExtent = 16 << 20

type zData struct {
	img     *Image
	nid     uint64
	size    int64
	lbits   uint
	layout  uint8
	advise  uint16
	algs    [2]Algorithm
	ebase   int64 // absolute offset of the index
	total   int64 // lclusters
	big     bool
	inline  bool
	frag    bool
	whole   bool  // the whole file is one fragment
	fragOff int64 // in the packed inode
	idata   int64 // absolute offset of the inline pcluster
	isize   int64 // its size
	tailLcn int64 // HEAD lcluster of the last extent

	mu  sync.Mutex
	la  int64  // the extent cached in buf
	buf []byte // its decoded bytes
}

// zlc is one decoded lcluster index record.
type zlc struct {
	typ        uint8
	clusterofs int64
	pblk       uint64
	d0, d1     int64
	cblks      int64 // CBLKCNT of a NONHEAD, 0 if none
	nextpack   int64 // end of the record's pack (ztailpacking data follows the last)
	partial    bool  // a HEAD with PARTIAL_REF: the extent is a prefix of its pcluster
}

// zext is one mapped extent.
type zext struct {
	la, llen int64 // logical start and length (to i_size or the next HEAD)
	headLcn  int64
	headtype uint8
	pa, plen int64
	kind     int // zPlain, zCompressed, zInline, zFragment
	alg      Algorithm
	partial  bool // decode only as far as the extent goes (PARTIAL_REF)
}

func (img *Image) zReader(ino *Inode) (*zData, error) {
	d := &zData{img: img, nid: ino.Nid, size: ino.Size, lbits: img.bits, layout: ino.Layout, la: -1}
	if ino.Size == 0 {
		return d, nil
	}
	if img.info.FeatureIncompat&FeatureIncompat48Bit != 0 {
		return nil, fmt.Errorf("erofs: nid %d: compressed files of 48-bit images are not supported", ino.Nid)
	}
	h := (ino.tailOff() + 7) &^ 7
	var hdr [8]byte
	if err := img.readFull(hdr[:], h); err != nil {
		return nil, fmt.Errorf("erofs: nid %d: map header: %w", ino.Nid, err)
	}
	if hdr[7]>>zFragmentInodeBit != 0 {
		d.frag, d.whole = true, true
		d.fragOff = int64(le.Uint64(hdr[:]) &^ (1 << 63))
		return d, d.checkPacked()
	}
	d.advise = le.Uint16(hdr[4:])
	d.algs = [2]Algorithm{Algorithm(hdr[6] & 15), Algorithm(hdr[6] >> 4)}
	for _, a := range d.algs {
		if a > AlgZstd {
			return nil, fmt.Errorf("erofs: nid %d: unknown compression algorithm %d", ino.Nid, a)
		}
	}
	if hdr[7]&15 != 0 {
		return nil, fmt.Errorf("erofs: nid %d: lclusters larger than a block are not supported", ino.Nid)
	}
	big := d.advise & (zAdviseBigPcluster1 | zAdviseBigPcluster2)
	if big != 0 && img.info.FeatureIncompat&FeatureIncompatComprCfgs == 0 {
		return nil, fmt.Errorf("erofs: nid %d: big pclusters in an image without them", ino.Nid)
	}
	if d.layout == LayoutCompressedCompact && big != 0 && big != zAdviseBigPcluster1|zAdviseBigPcluster2 {
		return nil, fmt.Errorf("erofs: nid %d: compact index with one of the two big-pcluster bits", ino.Nid)
	}
	d.big = d.advise&zAdviseBigPcluster1 != 0
	d.inline = d.advise&zAdviseInlinePcluster != 0
	d.frag = d.advise&zAdviseFragment != 0
	if d.inline && d.frag {
		return nil, fmt.Errorf("erofs: nid %d: both an inline and a fragment tail", ino.Nid)
	}
	d.total = (ino.Size + img.bs - 1) >> img.bits
	d.ebase = h + 8
	if d.layout == LayoutCompressedFull {
		d.ebase = h + 16
	}
	if d.inline || d.frag {
		// Find the tail extent as the kernel does: map the last byte.
		lc, err := d.load(d.total - 1)
		if err != nil {
			return nil, err
		}
		if d.inline {
			d.idata = lc.nextpack
			d.isize = int64(le.Uint16(hdr[2:]))
		} else {
			d.fragOff = int64(le.Uint32(hdr[0:]))
		}
		e, err := d.mapHead(ino.Size-1, lc)
		if err != nil {
			return nil, err
		}
		d.tailLcn = e.headLcn
		if d.inline {
			if d.isize == 0 || d.idata&(img.bs-1)+d.isize > img.bs {
				return nil, fmt.Errorf("erofs: nid %d: inline pcluster of %d bytes at %d crosses a block", ino.Nid, d.isize, d.idata)
			}
		}
		if d.frag {
			if d.layout == LayoutCompressedFull {
				head, err := d.load(e.headLcn)
				if err != nil {
					return nil, err
				}
				d.fragOff |= int64(head.pblk) << 32
			}
			if err := d.checkPacked(); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

func (d *zData) checkPacked() error {
	if d.img.info.FeatureIncompat&FeatureIncompatFragments == 0 {
		return fmt.Errorf("erofs: nid %d: a fragment in an image without a packed inode", d.nid)
	}
	if d.fragOff < 0 {
		return fmt.Errorf("erofs: nid %d: fragment offset out of range", d.nid)
	}
	return nil
}

func (d *zData) corrupt(lcn int64, format string, args ...any) error {
	return fmt.Errorf("erofs: nid %d: lcluster %d: %s", d.nid, lcn, fmt.Sprintf(format, args...))
}

// load decodes the index record of lcluster lcn.
func (d *zData) load(lcn int64) (zlc, error) {
	if lcn < 0 || lcn >= d.total {
		return zlc{}, d.corrupt(lcn, "outside the %d lclusters of the file", d.total)
	}
	if d.layout == LayoutCompressedFull {
		return d.loadFull(lcn)
	}
	return d.loadCompact(lcn)
}

func (d *zData) loadFull(lcn int64) (zlc, error) {
	pos := d.ebase + lcn*8
	var r [8]byte
	if err := d.img.readFull(r[:], pos); err != nil {
		return zlc{}, d.corrupt(lcn, "index: %v", err)
	}
	adv := le.Uint16(r[0:])
	l := zlc{typ: uint8(adv & 3), nextpack: pos + 8}
	switch l.typ {
	case lclusterNonhead:
		l.clusterofs = 1 << d.lbits
		l.d0 = int64(le.Uint16(r[4:]))
		if l.d0&cblkcnt != 0 {
			if !d.big {
				return zlc{}, d.corrupt(lcn, "block count without big pclusters")
			}
			l.cblks, l.d0 = l.d0&^cblkcnt, 1
		}
		l.d1 = int64(le.Uint16(r[6:]))
	default:
		l.clusterofs = int64(le.Uint16(r[2:]))
		if l.clusterofs >= 1<<d.lbits {
			return zlc{}, d.corrupt(lcn, "cluster offset %d", l.clusterofs)
		}
		l.pblk = uint64(le.Uint32(r[4:]))
		l.partial = adv&zPartialRef != 0
	}
	return l, nil
}

func (d *zData) loadCompact(lcn int64) (zlc, error) {
	use2B := d.advise&zAdviseCompacted2B != 0
	initial, n2b := compactSplit(uint64(d.ebase), int(d.total), use2B)
	pos := d.ebase
	shift := uint(2)
	switch i := int(lcn); {
	case i < initial:
		pos += int64(i) * 4
	case i < initial+n2b:
		pos += int64(initial)*4 + int64(i-initial)*2
		shift = 1
	default:
		pos += int64(initial)*4 + int64(n2b)*2 + int64(i-initial-n2b)*4
	}
	vcnt := 2
	if shift == 1 {
		vcnt = 16
		if d.lbits != 12 {
			return zlc{}, d.corrupt(lcn, "2-byte compact index with %d-byte lclusters", 1<<d.lbits)
		}
	} else if d.lbits > 14 {
		return zlc{}, d.corrupt(lcn, "compact index with %d-byte lclusters", 1<<d.lbits)
	}
	packSize := int64(vcnt) << shift
	base := pos &^ (packSize - 1)
	pack := make([]byte, packSize)
	if err := d.img.readFull(pack, base); err != nil {
		return zlc{}, d.corrupt(lcn, "index: %v", err)
	}
	lobits := max(d.lbits, 12)
	i := int((pos - base) >> shift)
	lo, typ := compactEntry(pack, i, vcnt, lobits)
	l := zlc{typ: typ, nextpack: base + packSize}
	if typ == lclusterNonhead {
		l.clusterofs = 1 << d.lbits
		switch {
		case lo&cblkcnt != 0:
			if !d.big {
				return zlc{}, d.corrupt(lcn, "block count without big pclusters")
			}
			l.cblks, l.d0 = int64(lo&^cblkcnt), 1
		case i+1 != vcnt:
			l.d0 = int64(lo)
		default:
			// The last entry of a pack holds delta[1]; delta[0] follows
			// from the entry before it.
			l.d1 = int64(lo)
			plo, ptyp := compactEntry(pack, i-1, vcnt, lobits)
			switch {
			case ptyp != lclusterNonhead:
				plo = 0
			case plo&cblkcnt != 0:
				plo = 1
			}
			l.d0 = int64(plo) + 1
		}
		return l, nil
	}
	// lo has 12 bits even for smaller lclusters: an offset past the
	// lcluster would start the extent after the bytes it maps
	// (TestReaderCompactClusterOfs).
	l.clusterofs = int64(lo)
	if l.clusterofs >= 1<<d.lbits {
		return zlc{}, d.corrupt(lcn, "cluster offset %d", l.clusterofs)
	}
	n, err := packBlocks(pack, i, vcnt, lobits, d.big)
	if err != nil {
		return zlc{}, d.corrupt(lcn, "%v", err)
	}
	l.pblk = uint64(le.Uint32(pack[packSize-4:])) + uint64(n)
	return l, nil
}

// mapHead finds the extent holding byte off, whose lcluster record is lc:
// its HEAD and logical start (kernel: z_erofs_do_map_blocks up to the
// lookback).
func (d *zData) mapHead(off int64, lc zlc) (zext, error) {
	lcn := off >> d.lbits
	endoff := off & (1<<d.lbits - 1)
	dist := lc.d0
	if lc.typ != lclusterNonhead {
		if endoff >= lc.clusterofs {
			return zext{la: lcn<<d.lbits | lc.clusterofs, headLcn: lcn, headtype: lc.typ}, nil
		}
		if lcn == 0 {
			return zext{}, d.corrupt(0, "the first extent starts at %d", lc.clusterofs)
		}
		dist = 1
	}
	for {
		if dist == 0 || dist > lcn {
			return zext{}, d.corrupt(lcn, "lookback distance %d", dist)
		}
		lcn -= dist
		l, err := d.load(lcn)
		if err != nil {
			return zext{}, err
		}
		if l.typ != lclusterNonhead {
			return zext{la: lcn<<d.lbits | l.clusterofs, headLcn: lcn, headtype: l.typ}, nil
		}
		dist = l.d0
	}
}

// mapExtent maps byte off to its whole extent, which holds off, so a
// caller that moves on to the extent's end always advances.
func (d *zData) mapExtent(off int64) (zext, error) {
	if d.whole {
		return zext{la: 0, llen: d.size, kind: zFragment}, nil
	}
	lc, err := d.load(off >> d.lbits)
	if err != nil {
		return zext{}, err
	}
	e, err := d.mapHead(off, lc)
	if err != nil {
		return zext{}, err
	}
	// The extent ends where the next HEAD says, or at i_size.
	end := d.size
	for lcn := e.headLcn + 1; lcn < d.total; lcn++ {
		l, err := d.load(lcn)
		if err != nil {
			return zext{}, err
		}
		if l.typ != lclusterNonhead {
			end = min(lcn<<d.lbits|l.clusterofs, d.size)
			break
		}
	}
	e.llen = end - e.la
	if e.llen <= 0 || e.llen > maxDecodedExtent {
		return zext{}, d.corrupt(e.headLcn, "extent of %d bytes", e.llen)
	}
	// A lookback distance that passes a HEAD maps off to an extent that
	// ends before it (TestReaderCorruptOffsets); ReadAt slices the
	// extent's bytes at off-e.la.
	switch {
	case end <= off:
		return zext{}, d.corrupt(e.headLcn, "extent %d..%d ends before offset %d", e.la, end, off)
	case e.la > off:
		return zext{}, d.corrupt(e.headLcn, "extent %d..%d starts after offset %d", e.la, end, off)
	}
	switch e.headtype {
	case lclusterHead1:
		e.alg = d.algs[0]
	case lclusterHead2:
		e.alg = d.algs[1]
	}
	head, err := d.load(e.headLcn)
	if err != nil {
		return zext{}, err
	}
	e.partial = head.partial
	switch {
	case d.inline && e.headLcn == d.tailLcn:
		e.kind, e.pa, e.plen = zInline, d.idata, d.isize
		if e.headtype != lclusterPlain {
			e.kind = zCompressed
		}
	case d.frag && e.headLcn == d.tailLcn:
		e.kind = zFragment
		return e, nil
	default:
		pa, err := d.img.blkOff(head.pblk)
		if err != nil {
			return zext{}, d.corrupt(e.headLcn, "%v", err)
		}
		e.pa, e.plen, e.kind = pa, d.img.bs, zCompressed
		if e.headtype == lclusterPlain {
			e.kind = zPlain
		} else if d.big && e.headLcn+1 < d.total {
			next, err := d.load(e.headLcn + 1)
			if err != nil {
				return zext{}, err
			}
			switch {
			case next.typ != lclusterNonhead:
			case next.cblks > 0:
				e.plen = next.cblks << d.lbits
			default:
				return zext{}, d.corrupt(e.headLcn+1, "no block count after a HEAD")
			}
		}
		if e.plen > MaxPclusterSize {
			return zext{}, d.corrupt(e.headLcn, "pcluster of %d bytes", e.plen)
		}
	}
	if e.headtype == lclusterPlain && e.llen > e.plen {
		return zext{}, d.corrupt(e.headLcn, "plain extent of %d bytes in %d", e.llen, e.plen)
	}
	return e, nil
}

// decode returns the bytes of extent e (cached for the next read).
func (d *zData) decode(e zext) ([]byte, error) {
	if d.la == e.la && len(d.buf) == int(e.llen) {
		return d.buf, nil
	}
	out, err := d.decodeExtent(e)
	if err != nil {
		return nil, err
	}
	d.la, d.buf = e.la, out
	return out, nil
}

// decodeExtent reads and decompresses extent e.
func (d *zData) decodeExtent(e zext) ([]byte, error) {
	// Check the range before allocating: a corrupt block count must not
	// cost a MiB on every read of every file that shares the extent (the
	// packed inode's, for fragments).
	dev, off, err := d.img.mapDevice(0, e.pa, e.plen)
	if err != nil {
		return nil, d.corrupt(e.headLcn, "pcluster: %v", err)
	}
	raw := make([]byte, e.plen)
	if err := readFullAt(d.img.devs[dev].r, raw, off); err != nil {
		return nil, d.corrupt(e.headLcn, "pcluster: %v", err)
	}
	out := make([]byte, e.llen)
	if e.kind == zPlain || e.headtype == lclusterPlain {
		if d.advise&zAdviseInterlaced != 0 && e.kind == zPlain {
			mask := d.img.bs - 1
			for k := range out {
				out[k] = raw[(e.la+int64(k))&mask]
			}
		} else {
			copy(out, raw)
		}
	} else {
		// 0padding: the stream ends the pcluster; leading zeros in its
		// first block are padding.
		limit := min(int64(len(raw)), d.img.bs-(e.pa&(d.img.bs-1)))
		start := int64(0)
		for start < limit && raw[start] == 0 {
			start++
		}
		if start == limit {
			return nil, d.corrupt(e.headLcn, "pcluster at %d: no stream in its first block", e.pa)
		}
		k := codecs[e.alg]
		if k == nil {
			return nil, d.corrupt(e.headLcn, "%s decompression is not supported", e.alg)
		}
		decompress := k.decompress
		if e.partial {
			decompress = decompressPrefix(e.alg)
		}
		if err := decompress(out, raw[start:]); err != nil {
			return nil, d.corrupt(e.headLcn, "pcluster at %d (%d bytes, %s): %v", e.pa, e.plen, e.alg, err)
		}
	}
	return out, nil
}

func (d *zData) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("erofs: negative offset")
	}
	if off >= d.size {
		return 0, io.EOF
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	done := 0
	for done < len(p) && off < d.size {
		e, err := d.mapExtent(off)
		if err != nil {
			return done, err
		}
		n := int(min(int64(len(p)-done), e.la+e.llen-off))
		if e.kind == zFragment {
			if err := d.readFragment(p[done:done+n], d.fragOff+off-e.la); err != nil {
				return done, err
			}
		} else {
			buf, err := d.decode(e)
			if err != nil {
				return done, err
			}
			copy(p[done:done+n], buf[off-e.la:])
		}
		done += n
		off += int64(n)
	}
	if done < len(p) {
		return done, io.EOF
	}
	return done, nil
}

// readFragment reads bytes of the packed inode.
func (d *zData) readFragment(p []byte, off int64) error {
	packed, err := d.img.packedData()
	if err != nil {
		return fmt.Errorf("erofs: nid %d: %w", d.nid, err)
	}
	if off < 0 || off > packed.size-int64(len(p)) {
		return fmt.Errorf("erofs: nid %d: fragment at %d (%d bytes) beyond the packed inode's %d", d.nid, off, len(p), packed.size)
	}
	if err := readFullAt(packed.r, p, off); err != nil {
		return fmt.Errorf("erofs: nid %d: fragment: %w", d.nid, err)
	}
	return nil
}

type packedInode struct {
	r    io.ReaderAt
	size int64
}

// packedData opens the packed inode once.
func (img *Image) packedData() (*packedInode, error) {
	img.packedOnce.Do(func() {
		ino, err := img.InodeAt(img.info.PackedNid)
		if err != nil {
			img.packedErr = fmt.Errorf("packed inode: %w", err)
			return
		}
		if !ino.IsRegular() {
			img.packedErr = fmt.Errorf("packed inode %d is not a regular file", ino.Nid)
			return
		}
		if ino.Layout == LayoutCompressedFull || ino.Layout == LayoutCompressedCompact {
			z, err := img.zReader(ino)
			if err != nil {
				img.packedErr = err
				return
			}
			if z.frag {
				img.packedErr = fmt.Errorf("packed inode %d has fragments itself", ino.Nid)
				return
			}
			img.packed = &packedInode{r: z, size: ino.Size}
			return
		}
		r, err := img.dataReader(ino)
		if err != nil {
			img.packedErr = err
			return
		}
		img.packed = &packedInode{r: r, size: ino.Size}
	})
	return img.packed, img.packedErr
}

// decompressPrefix returns a decoder that fills dst with the first bytes a
// pcluster decodes to, as the kernel's partial decoding does for the
// extents that use a prefix of a shared pcluster (PARTIAL_REF).
func decompressPrefix(alg Algorithm) func(dst, src []byte) error {
	switch alg {
	case AlgLZ4:
		return func(dst, src []byte) error {
			n, err := lz4.DecompressPartial(dst, src)
			if err == nil && n != len(dst) {
				err = fmt.Errorf("lz4 stream decodes to %d bytes, the extent has %d", n, len(dst))
			}
			return err
		}
	case AlgDeflate:
		return func(dst, src []byte) error {
			if err := deflate.Decompress(dst, src); err != nil && !errors.Is(err, deflate.ErrLongStream) {
				return err
			}
			return nil
		}
	case AlgZstd:
		return func(dst, src []byte) error {
			dec, err := prefixZstd()
			if err != nil {
				return err
			}
			out, err := dec.DecodeAll(src, nil)
			if err != nil {
				return fmt.Errorf("zstd: %w", err)
			}
			if len(out) < len(dst) {
				return fmt.Errorf("zstd frame decodes to %d bytes, the extent has %d", len(out), len(dst))
			}
			copy(dst, out)
			return nil
		}
	}
	return func([]byte, []byte) error {
		return fmt.Errorf("%s: extents that use part of a pcluster are not supported", alg)
	}
}

var (
	prefixZstdOnce sync.Once
	prefixZstdDec  *kzstd.Decoder
	prefixZstdErr  error
)

// prefixZstd is a zstd decoder for whole frames of any size up to what an
// extent may hold (the zstd package's decodes exactly one length).
func prefixZstd() (*kzstd.Decoder, error) {
	prefixZstdOnce.Do(func() {
		prefixZstdDec, prefixZstdErr = kzstd.NewReader(nil,
			kzstd.WithDecoderConcurrency(0),
			kzstd.WithDecoderLowmem(true),
			kzstd.WithDecoderMaxWindow(zstd.MaxWindow),
			kzstd.WithDecoderMaxMemory(maxDecodedExtent))
	})
	return prefixZstdDec, prefixZstdErr
}

// Extent is one extent of a compressed file, as inspect shows it.
type Extent struct {
	// Logical and Length place it in the file.
	Logical, Length int64
	// Physical is the byte address of its pcluster (0 for an inline tail
	// or a fragment), PhysLen the pcluster's size.
	Physical, PhysLen int64
	// Partial marks an extent that uses a prefix of a shared pcluster.
	Partial bool
}

// Extents calls fn for each extent of a compressed file, in file order.
func (img *Image) Extents(ino *Inode, fn func(Extent) error) error {
	if ino.Layout != LayoutCompressedFull && ino.Layout != LayoutCompressedCompact {
		return fmt.Errorf("erofs: nid %d: not compressed", ino.Nid)
	}
	d, err := img.zReader(ino)
	if err != nil {
		return err
	}
	for off := int64(0); off < d.size; {
		e, err := d.mapExtent(off)
		if err != nil {
			return err
		}
		x := Extent{Logical: e.la, Length: e.llen, Partial: e.partial}
		if e.kind == zPlain || e.kind == zCompressed {
			x.Physical, x.PhysLen = e.pa, e.plen
		}
		if err := fn(x); err != nil {
			return err
		}
		off = e.la + e.llen
	}
	return nil
}
