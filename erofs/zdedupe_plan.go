package erofs

import (
	"encoding/binary"
	"math/bits"
)

// Planning a run of extent dedupe (zdedupe.go): how far the data repeats
// pclusters written before, where the run can start and end so that every
// extent boundary lands in an lcluster of its own, and the extents that
// fill the gaps to the worker's extents around it.

// commonPrefix is the length of the longest common prefix of a and b.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for ; i+8 <= n; i += 8 {
		if x := binary.LittleEndian.Uint64(a[i:]) ^ binary.LittleEndian.Uint64(b[i:]); x != 0 {
			return i + bits.TrailingZeros64(x)/8
		}
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// planRun finds how far the bytes from x on repeat entry e and the entries
// after it in e's file, trims the run so that every extent boundary lands
// in an lcluster of its own, and plans the stubs that fill the gaps to the
// worker's extents. It reports whether the run saves blocks; if so d.refs,
// d.sa, d.stubs and d.front describe what to write. next is the first op
// not yet written and limit the end of what may change.
func (d *zdedupe) planRun(b *Builder, v *segView, data []byte, next, limit, x, e int) (bool, error) {
	if err := d.matchRun(b, data, x, e); err != nil {
		return false, err
	}
	x = d.trimFront(b, v, next, x)
	d.trimEnd(b, v, len(data), limit, x)
	if len(d.refs) == 0 {
		return false, nil
	}
	d.x, d.lastRef = x, d.refEnts[len(d.refEnts)-1]
	spec := d.replaced(v, len(data))
	if spec < minSaving {
		return false, nil
	}
	if !d.planStubs(b, data) {
		return false, nil
	}
	for _, op := range d.stubs {
		spec -= int(op.blocks)
	}
	if spec < minSaving {
		return false, nil
	}
	d.savedBlocks += int64(spec)
	return true, nil
}

// matchRun fills d.refs with the references the bytes from x on can be:
// entry e, then the entries after it in e's file, each checked by its
// head hash and then byte for byte against its decoded pcluster. The run
// stops at the first entry that differs; that one is used in part if the
// codec's decoders stop where the reader wants.
func (d *zdedupe) matchRun(b *Builder, data []byte, x, e int) error {
	bits := b.blkbits
	d.refs, d.refEnts = d.refs[:0], d.refEnts[:0]
	cur := x
	for i := e; cur < len(data) && i < len(d.ents); i++ {
		ent := &d.ents[i]
		if i != e && !ent.cont || headHash(data[cur:min(len(data), cur+int(ent.length))]) != ent.head {
			break
		}
		dec, err := d.decoded(b, i)
		if err != nil {
			return err
		}
		n := commonPrefix(dec, data[cur:])
		full := n == int(ent.length)
		if !full && !(d.partial || ent.kind == zPlain) {
			break
		}
		// A HEAD needs an lcluster of its own, and a pcluster of more
		// than a block a NONHEAD after it for its block count.
		if end := cur + n; end>>bits <= cur>>bits || ent.blocks > 1 && end>>bits < cur>>bits+2 {
			break
		}
		r := zextent{length: uint32(n), blocks: ent.blocks, kind: ent.kind, share: zShareFull, pblk: ent.pblk}
		if !full {
			r.share = zSharePartial
		}
		d.refs = append(d.refs, r)
		d.refEnts = append(d.refEnts, i)
		cur += n
		if !full {
			break
		}
	}
	return nil
}

// trimFront sets d.sa, where the run's front stub starts, and d.trunc, and
// returns where the references start. The run starts at an extent
// boundary of the worker's; or inside an extent whose pcluster is kept and
// used in part, as long as that does not take more blocks than compressing
// the part again would; or after a boundary in an earlier lcluster. When
// none of these can be, the first reference is dropped and the next one
// tried.
func (d *zdedupe) trimFront(b *Builder, v *segView, next, x int) int {
	bits := b.blkbits
	d.trunc = false
	for len(d.refs) > 0 {
		k := v.opAt(x)
		sa := v.start[k]
		op := v.j.ops[k]
		if x != sa && x>>bits > sa>>bits && (op.kind == zPlain || op.kind == zCompressed && d.partial) &&
			(op.blocks <= 1 || x>>bits >= sa>>bits+2 && int(op.blocks)*(x-sa) >= int(op.length)*(int(op.blocks)-1)) {
			d.sa, d.trunc = sa, true
			break
		}
		if x != sa && x>>bits == sa>>bits {
			if k-1 < next {
				x += int(d.refs[0].length)
				d.refs, d.refEnts = d.refs[1:], d.refEnts[1:]
				continue
			}
			sa = v.start[k-1]
		}
		d.sa = sa
		break
	}
	return x
}

// trimEnd sets d.sb, where the stub after the run ends, dropping the last
// reference while the run cannot end where it does. Past limit, only a
// run that ends the file (of n bytes in this segment) may go, and its
// last HEAD must not be in the file's last lcluster (the kernel would take
// the extent to go on to the lcluster's end).
func (d *zdedupe) trimEnd(b *Builder, v *segView, n, limit, x int) {
	bits := b.blkbits
	for len(d.refs) > 0 {
		m := x
		for _, r := range d.refs {
			m += int(r.length)
		}
		d.sb = m
		if m > limit {
			lastHead := v.j.base + uint64(m-int(d.refs[len(d.refs)-1].length))
			fileEnd := v.j.base + uint64(n)
			if m != n || lastHead>>bits >= (fileEnd-1)>>bits {
				d.refs, d.refEnts = d.refs[:len(d.refs)-1], d.refEnts[:len(d.refEnts)-1]
				continue
			}
		}
		if m == limit || m == n {
			break
		}
		k := v.opAt(m)
		if v.start[k] == m {
			break
		}
		d.sb = v.end(k)
		if d.sb>>bits == m>>bits {
			if k+1 < len(v.j.ops) && v.end(k+1) <= limit {
				d.sb = v.end(k + 1)
			} else {
				d.refs, d.refEnts = d.refs[:len(d.refs)-1], d.refEnts[:len(d.refEnts)-1]
				continue
			}
		}
		break
	}
}

// replaced is the blocks the worker's extents from d.sa to d.sb take (of
// a segment of n bytes): the most the run can save, before the stubs
// take some of it back.
func (d *zdedupe) replaced(v *segView, n int) int {
	ka, kb := v.opAt(d.sa), len(v.j.ops)
	if d.sb < n {
		kb = v.opAt(d.sb)
	}
	if d.trunc {
		ka++ // kept
	}
	spec := 0
	for _, op := range v.j.ops[ka:kb] {
		spec += int(op.blocks)
		if op.kind == zopFlatTail || op.kind == zopInlinePlain {
			spec++ // a block, or inline room for the most part of one
		}
	}
	return spec
}

// planStubs plans the stubs from d.sa to the run (none when the extent at
// d.sa is kept in part) and from the run's end to d.sb, and sets d.front.
// It reports false if either gap cannot be filled.
func (d *zdedupe) planStubs(b *Builder, data []byte) bool {
	d.stubs, d.arena = d.stubs[:0], d.arena[:0]
	if !d.trunc && !d.planRange(b, data, d.sa, d.x) {
		return false
	}
	d.front = len(d.stubs)
	m := d.x
	for _, r := range d.refs {
		m += int(r.length)
	}
	return d.planRange(b, data, m, d.sb)
}

// planRange plans extents for data[a:b), compressed where that saves a
// block, so that every boundary between them lies in an lcluster of its
// own (a and b already do, or a == b). It reports false if that cannot be
// done (a short stretch that neither compresses into one pcluster nor
// fits a plain block).
func (d *zdedupe) planRange(b *Builder, data []byte, a, end int) bool {
	bs := b.bs
	bits := b.blkbits
	mask := bs - 1
	z := b.z
	fb := end &^ mask // a boundary before end must lie before this
	for cur := a; cur < end; {
		if end-cur <= bs {
			d.addStub(zPlain, data[cur:end], end-cur, 1, 0)
			return true
		}
		win := data[cur:min(end, cur+z.maxExtent)]
		wn, c := d.comp.CompressDestSize(d.dst, win)
		nblk := (wn + bs - 1) / bs
		if c == len(data[cur:end]) {
			if nblk*bs >= c && nblk > 1 {
				return false // would need a NONHEAD for its block count
			}
			d.addStub(zCompressed, d.dst[:wn], c, nblk, nblk*bs-wn)
			return true
		}
		p, plain := cur+c, c == 0 || nblk*bs >= c
		if plain {
			p = cur + bs
		}
		if p >= fb {
			p = fb - 1 // leave the rest an lcluster boundary
			if p>>bits <= cur>>bits {
				return false
			}
			if !plain {
				wn, c = d.comp.CompressDestSize(d.dst, data[cur:p])
				nblk = (wn + bs - 1) / bs
				switch {
				case c != p-cur:
					return false
				case nblk*bs >= c && c <= bs:
					plain = true
				case nblk*bs >= c && nblk > 1:
					return false
				}
			}
		}
		if plain {
			d.addStub(zPlain, data[cur:p], p-cur, 1, 0)
		} else {
			d.addStub(zCompressed, d.dst[:wn], p-cur, nblk, nblk*bs-wn)
		}
		cur = p
	}
	return true
}

func (d *zdedupe) addStub(kind uint8, p []byte, length, blocks, pad int) {
	d.stubs = append(d.stubs, zop{kind: kind, length: uint32(length), blocks: uint16(blocks), padBefore: uint32(pad), off: len(d.arena), n: len(p)})
	d.arena = append(d.arena, p...)
}
