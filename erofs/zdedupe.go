package erofs

import (
	"fmt"
	"io"
)

// Extent dedupe (Compression.Dedupe; erofs-format.md §7.11): a run of data
// that earlier pclusters already hold becomes extents pointing at those
// pclusters, in this file or across files, at any byte offset.
//
// mkfs.erofs -Ededupe keys each pcluster by the rolling hash of its first
// block and, before every extent it cuts, looks that hash up at every byte
// position of the previous extent, keeping every extent's data in memory.
// Here instead:
//
//   - The workers find content-defined anchors in their segments: the
//     positions where a gear hash of the last 64 bytes has its top
//     anchorBits bits clear, about one per KiB. This is a table lookup and
//     an add per byte, in parallel with the compression it rides along.
//   - Every pcluster written is remembered in a table of a few tens of
//     bytes: where it is, how many bytes it decodes to, the hash of its
//     first 64 bytes, and its first anchor, by whose hash it is found.
//   - When a segment is applied (on the writer's goroutine, in input order,
//     so the result does not depend on the number of workers), its anchors
//     are looked up; an anchor that a pcluster holds at offset o means the
//     pcluster may start o bytes earlier. That is checked by decoding the
//     pcluster from the output and comparing bytes, so no hash is trusted.
//     The run then follows the pclusters that came after the first one in
//     its file for as long as the bytes agree; its last pcluster may be
//     used in part (PARTIAL_REF).
//   - The segment keeps the extents its worker cut, except around a run:
//     the bytes between the worker's extent boundaries and the run's ends
//     are compressed again here. A run is taken only if that saves blocks.
//
// Memory: one table entry per pcluster written plus a map entry for its
// anchor, whatever the data size; the segments in flight keep their input
// beside their output (twice the in-flight buffers).

const (
	// anchorBits sets the anchor rate: one position in 2^anchorBits.
	anchorBits = 10
	// anchorWindow is the span of the gear hash; an anchor's hash is a
	// function of exactly the anchorWindow bytes that end at it.
	anchorWindow = 64
	// anchorGap keeps anchors apart in data whose hash repeats (zeros,
	// short periods), which would otherwise be an anchor at every byte.
	anchorGap = 256
	// maxAnchorOff bounds the offset of a pcluster's anchor in its extent:
	// extents are written behind the lookups by this much, so that a run
	// can reach back to the start of a pcluster found by its anchor.
	maxAnchorOff = 16 << 10
	// minSaving is the number of blocks a run must save to be taken.
	minSaving = 1
)

// gear is the gear hash's byte table (pseudo-random, fixed).
var gear = func() (t [256]uint64) {
	s := uint64(0x6f63696572_6f6673) // splitmix64
	for i := range t {
		s += 0x9E3779B97F4A7C15
		z := s
		z = (z ^ z>>30) * 0xBF58476D1CE4E5B9
		z = (z ^ z>>27) * 0x94D049BB133111EB
		t[i] = z ^ z>>31
	}
	return t
}()

// anchor is a content-defined position in a segment: pos is the last byte
// of the anchorWindow bytes whose gear hash is key.
type anchor struct {
	pos uint32
	key uint64
}

// findAnchors appends the anchors of data to dst. The hash starts from
// zero at the segment start, so positions before anchorWindow-1 are none.
// The loop is unrolled: the test is rarely true, and the hash's chain is
// one shift and add per byte.
func findAnchors(dst []anchor, data []byte) []anchor {
	const thr = 1 << (64 - anchorBits) // an anchor's hash is below it
	var h uint64
	next := anchorWindow - 1 // the first position that may be an anchor
	i := 0
	for ; i+4 <= len(data); i += 4 {
		p := data[i : i+4 : i+4]
		if h = h<<1 + gear[p[0]]; h < thr && i >= next {
			dst, next = append(dst, anchor{uint32(i), h}), i+anchorGap
		}
		if h = h<<1 + gear[p[1]]; h < thr && i+1 >= next {
			dst, next = append(dst, anchor{uint32(i + 1), h}), i+1+anchorGap
		}
		if h = h<<1 + gear[p[2]]; h < thr && i+2 >= next {
			dst, next = append(dst, anchor{uint32(i + 2), h}), i+2+anchorGap
		}
		if h = h<<1 + gear[p[3]]; h < thr && i+3 >= next {
			dst, next = append(dst, anchor{uint32(i + 3), h}), i+3+anchorGap
		}
	}
	for ; i < len(data); i++ {
		if h = h<<1 + gear[data[i]]; h < thr && i >= next {
			dst, next = append(dst, anchor{uint32(i), h}), i+anchorGap
		}
	}
	return dst
}

// headHash is the gear hash of p's first anchorWindow bytes (or all of a
// shorter p): a cheap first check that a pcluster starts where a run would.
func headHash(p []byte) uint64 {
	var h uint64
	for _, c := range p[:min(len(p), anchorWindow)] {
		h = h<<1 + gear[c]
	}
	return h
}

// dentry is a pcluster the table knows.
type dentry struct {
	key    uint64 // the hash of its anchor, if hasKey
	head   uint64 // headHash of its data
	pblk   uint32
	length uint32 // bytes it decodes to
	off    uint32 // its anchor's offset in its data
	blocks uint16
	kind   uint8 // zPlain or zCompressed
	hasKey bool
	cont   bool // it follows the previous entry in its file
}

// zdedupe is the table and the state of extent dedupe, used on the
// writer's goroutine only.
type zdedupe struct {
	r       io.ReaderAt // the output, to read pclusters back
	ents    []dentry
	byKey   map[uint64]int32
	partial bool // the codec's decoders take PARTIAL_REF extents

	comp compressor // recompresses around runs
	dst  []byte     // one pcluster
	raw  []byte     // a pcluster read back
	dec  []byte     // decoded bytes of entry decIdx
	dIdx int

	// The file being applied.
	lastOwn bool // its last extent is the last entry
	chain   int  // entry to try at the start of its next segment, or -1

	// The run being planned: references from byte x of the segment,
	// the last to entry lastRef; the stubs go from sa to x and on to sb.
	refs    []zextent
	x       int
	sa, sb  int
	trunc   bool // the op at sa is kept, cut short at x (zOwnPartial)
	lastRef int
	refEnts []int
	stubs   []zop  // recompressed extents before and after a run
	front   int    // stubs[:front] come before the run
	arena   []byte // their bytes

	// Totals, for Stats and the superblock.
	sharedExtents int64
	sharedBytes   int64
	savedBlocks   int64
}

func newZdedupe(z *zwriter, r io.ReaderAt) (*zdedupe, error) {
	comp, err := z.c.newCompressor()
	if err != nil {
		return nil, err
	}
	return &zdedupe{
		r: r, byKey: map[uint64]int32{}, comp: comp, dst: make([]byte, z.pcluster),
		dIdx: -1, chain: -1,
		// The lzma package decodes only exactly; lz4, deflate and zstd
		// (and plain pclusters) stop where the reader wants.
		partial: z.c.Algorithm != AlgLZMA,
	}, nil
}

// segView is a job seen as extents over its input: op i covers
// data[start[i]:start[i+1]].
type segView struct {
	j     *zjob
	start []int
}

func (v *segView) end(i int) int { return v.start[i+1] }

// opAt is the op that holds byte x (x < the segment's length).
func (v *segView) opAt(x int) int {
	lo, hi := 0, len(v.j.ops)
	for hi-lo > 1 {
		m := (lo + hi) / 2
		if v.start[m] <= x {
			lo = m
		} else {
			hi = m
		}
	}
	return lo
}

// applyDedupe writes a job's result as apply does, with the runs that
// earlier pclusters hold turned into references to them.
func (b *Builder) applyDedupe(j *zjob) error {
	d := b.z.dd
	if j.base == 0 {
		d.lastOwn, d.chain = false, -1
	}
	s := newSegApply(b, j)
	if c := d.chain; c >= 0 {
		d.chain = -1
		if err := s.tryRun(0, c); err != nil {
			return err
		}
	}
	if err := s.lookUpAnchors(); err != nil {
		return err
	}
	if err := s.emit(len(j.data)); err != nil {
		return err
	}
	return b.applied(j)
}

// segApply is a segment that applyDedupe writes: its worker's extents,
// and how far writing them has got.
type segApply struct {
	b *Builder
	d *zdedupe
	j *zjob
	v segView
	// limit is the end of what runs may replace: the last extent of a
	// file stays as the worker made it (the tail rules: inline, fragment,
	// plain in the last lcluster), unless a run covers it to the end of
	// the file.
	limit int
	next  int // the first op not yet written; pos = v.start[next]
	ak    int // the first anchor not yet given to a written extent
}

func newSegApply(b *Builder, j *zjob) *segApply {
	s := &segApply{b: b, d: b.z.dd, j: j, v: segView{j: j, start: make([]int, 0, len(j.ops)+1)}}
	n := 0
	for _, op := range j.ops {
		s.v.start = append(s.v.start, n)
		n += int(op.length)
	}
	s.v.start = append(s.v.start, n)
	s.limit = len(j.data)
	if j.last && len(j.ops) > 0 {
		s.limit = s.v.start[len(j.ops)-1]
	}
	return s
}

// lookUpAnchors tries a run at every anchor of the segment that a
// pcluster in the table holds. The worker's extents are written as the
// anchors pass them, maxAnchorOff behind, so that a run found by an
// anchor can still start up to that much before it.
func (s *segApply) lookUpAnchors() error {
	d, data := s.d, s.j.data
	for _, a := range s.j.anchors {
		y := int(a.pos)
		if y >= len(data) {
			break
		}
		if s.next >= len(s.j.ops) || y < s.v.start[s.next] {
			continue
		}
		if err := s.emit(y - maxAnchorOff); err != nil {
			return err
		}
		i, ok := d.byKey[a.key]
		if !ok {
			continue
		}
		e := &d.ents[i]
		x := y - int(e.off)
		if x < s.v.start[s.next] || x >= len(data) || headHash(data[x:min(len(data), x+int(e.length))]) != e.head {
			continue
		}
		if err := s.tryRun(x, int(i)); err != nil {
			return err
		}
	}
	return nil
}

// emit writes the worker's extents that end at or before upto.
func (s *segApply) emit(upto int) error {
	j := s.j
	for s.next < len(j.ops) && s.v.end(s.next) <= upto {
		op := j.ops[s.next]
		if err := s.d.writeOwn(s.b, j, j.zf, op, s.v.start[s.next], s.v.end(s.next), j.opBytes(op), &s.ak); err != nil {
			return err
		}
		s.next++
	}
	return nil
}

// tryRun plans a run of entry e's data from byte x and, if it saves
// blocks, writes it: the worker's extents up to the front stub, the
// stub, the references, the stub after, and goes on after it.
func (s *segApply) tryRun(x, e int) error {
	d := s.d
	ok, err := d.planRun(s.b, &s.v, s.j.data, s.next, s.limit, x, e)
	if !ok || err != nil {
		return err
	}
	pos, err := s.writeFront()
	if err != nil {
		return err
	}
	pos = s.writeRefs(pos)
	if pos, err = s.writeStubs(d.stubs[d.front:], pos); err != nil {
		return err
	}
	return s.resume(pos)
}

// writeFront writes the worker's extents before the run and the front
// stub (or the extent at d.sa kept in part), and returns where the
// references start.
func (s *segApply) writeFront() (int, error) {
	d, j, zf := s.d, s.j, s.j.zf
	sa := d.sa
	if err := s.emit(sa); err != nil {
		return 0, err
	}
	pos := sa
	if d.trunc {
		op := j.ops[s.next]
		if err := d.writeOwn(s.b, j, zf, op, sa, s.v.end(s.next), j.opBytes(op), &s.ak); err != nil {
			return 0, err
		}
		x := &zf.extents[len(zf.extents)-1]
		x.length, x.share = uint32(d.x-sa), zOwnPartial
		zf.shared++
		pos = d.x
	}
	return s.writeStubs(d.stubs[:d.front], pos)
}

// writeStubs writes planned stubs from byte pos on and returns where they
// end.
func (s *segApply) writeStubs(stubs []zop, pos int) (int, error) {
	d := s.d
	for _, op := range stubs {
		if err := d.writeOwn(s.b, s.j, s.j.zf, op, pos, pos+int(op.length), d.arena[op.off:op.off+op.n], &s.ak); err != nil {
			return 0, err
		}
		pos += int(op.length)
	}
	return pos, nil
}

// writeRefs adds the run's references from byte pos on and returns where
// they end.
func (s *segApply) writeRefs(pos int) int {
	d, zf := s.d, s.j.zf
	for _, r := range d.refs {
		zf.extents = append(zf.extents, r)
		zf.shared++
		d.sharedExtents++
		d.sharedBytes += int64(r.length)
		pos += int(r.length)
	}
	d.lastOwn = false
	return pos
}

// resume goes on with the worker's extents after a run that ends at pos.
// A run that ends with the segment and a whole pcluster may go on with
// the next one in the file's next segment: d.chain says which.
func (s *segApply) resume(pos int) error {
	d, j, data := s.d, s.j, s.j.data
	s.next = s.v.opAt(pos)
	if pos == len(data) {
		s.next = len(j.ops)
	} else if s.v.start[s.next] != pos {
		return fmt.Errorf("internal: dedupe run ends at %d, not at an extent boundary", pos)
	}
	d.chain = -1
	if last := d.refs[len(d.refs)-1]; pos == len(data) && !j.last && last.share == zShareFull {
		if e := d.lastRef; e+1 < len(d.ents) && d.ents[e+1].cont {
			d.chain = e + 1
		}
	}
	return nil
}

// writeOwn writes one extent of the file's own, data[s:e) of the segment,
// and remembers its pcluster; tail kinds go through apply's usual path.
func (d *zdedupe) writeOwn(b *Builder, j *zjob, zf *zfile, op zop, s, e int, bytes []byte, ak *int) error {
	n := len(zf.extents)
	// bytes may be the dedupe arena's, which the next job reuses.
	if err := b.applyOp(j, op, bytes, false); err != nil {
		return err
	}
	if len(zf.extents) != n+1 {
		d.lastOwn = false
		return nil
	}
	x := zf.extents[n]
	if x.share != 0 || (x.kind != zPlain && x.kind != zCompressed) || x.blocks == 0 {
		d.lastOwn = false
		return nil
	}
	ent := dentry{
		pblk: uint32(b.outBlk) - uint32(x.blocks), length: x.length, blocks: x.blocks, kind: x.kind,
		head: headHash(j.data[s:e]), cont: d.lastOwn,
	}
	as := j.anchors
	for *ak < len(as) && int(as[*ak].pos) < s+anchorWindow-1 {
		*ak++
	}
	if *ak < len(as) && int(as[*ak].pos) < e && int(as[*ak].pos)-s <= maxAnchorOff {
		ent.key, ent.off, ent.hasKey = as[*ak].key, as[*ak].pos-uint32(s), true
	}
	i := int32(len(d.ents))
	d.ents = append(d.ents, ent)
	if ent.hasKey {
		if _, dup := d.byKey[ent.key]; !dup {
			d.byKey[ent.key] = i
		}
	}
	d.lastOwn = true
	return nil
}

// forget drops the entries of pclusters at or after block blk, which the
// output is rewound over.
func (d *zdedupe) forget(blk uint64) {
	for len(d.ents) > 0 && uint64(d.ents[len(d.ents)-1].pblk) >= blk {
		i := len(d.ents) - 1
		if e := d.ents[i]; e.hasKey && d.byKey[e.key] == int32(i) {
			delete(d.byKey, e.key)
		}
		d.ents = d.ents[:i]
	}
	if d.dIdx >= len(d.ents) {
		d.dIdx = -1
	}
	d.lastOwn, d.chain = false, -1
}

// decoded returns the bytes entry i decodes to, read back from the output.
func (d *zdedupe) decoded(b *Builder, i int) ([]byte, error) {
	e := &d.ents[i]
	if d.dIdx == i {
		return d.dec[:e.length], nil
	}
	bs := b.bs
	end := (uint64(e.pblk) + uint64(e.blocks)) * uint64(bs)
	if end > b.outBlk*uint64(bs)-uint64(b.out.Buffered()) {
		if err := b.out.Flush(); err != nil {
			return nil, err
		}
	}
	// No write may run beside the read: an io.WriterAt need not allow a
	// ReadAt at the same time (an *os.File does; a buffer in memory that
	// grows does not).
	if err := b.out.settle(); err != nil {
		return nil, err
	}
	n := int(e.blocks) * bs
	if cap(d.raw) < n {
		d.raw = make([]byte, n)
	}
	raw := d.raw[:n]
	if _, err := d.r.ReadAt(raw, int64(e.pblk)*int64(bs)); err != nil {
		return nil, fmt.Errorf("dedupe: reading back the pcluster at block %d: %w", e.pblk, err)
	}
	if cap(d.dec) < int(e.length) {
		d.dec = make([]byte, e.length)
	}
	dec := d.dec[:e.length]
	d.dIdx = -1
	if e.kind == zPlain {
		copy(dec, raw)
	} else {
		start := 0
		for start < bs && raw[start] == 0 {
			start++
		}
		if err := codecs[b.z.c.Algorithm].decompress(dec, raw[start:]); err != nil {
			return nil, fmt.Errorf("dedupe: the pcluster at block %d does not decode: %w", e.pblk, err)
		}
	}
	d.dIdx = i
	return dec, nil
}

// ExtentDedupe reports what extent dedupe shared: the extents that use an
// earlier pcluster, the bytes they hold, and the blocks that saved.
func (b *Builder) ExtentDedupe() (extents, bytes, savedBlocks int64) {
	if b.z == nil || b.z.dd == nil {
		return 0, 0, 0
	}
	d := b.z.dd
	return d.sharedExtents, d.sharedBytes, d.savedBlocks
}
