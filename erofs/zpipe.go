package erofs

import (
	"fmt"
	"io"
	"runtime"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// Compression runs on worker goroutines while the caller of Add keeps
// reading input, and on the caller's goroutine whenever it would wait; the
// results are written in input order on the caller's goroutine, which alone
// touches the output, the spools and the inodes.
//
// A file is cut into segments of segmentSize bytes, each compressed on its
// own: extents never cross a segment boundary. The boundaries depend only
// on the file size and the options, so the image is the same for every
// number of workers (one worker cuts the same segments). The price is at
// most one partly filled pcluster per segment.
//
// Memory: the input of the jobs in flight, in a ring of a few segments
// (zring.go), plus one pcluster of output per worker.

// segmentSize is the unit of parallel compression within a file.
const segmentSize = 4 << 20

// plainSegment is the segment of uncompressed files (Builder.writePlain):
// only their hashing is parallel, and the layout does not depend on it.
// Half a compression segment: as fast as a whole one with less peak RSS,
// where smaller segments cost more time in handing them over than they
// save in memory (docs/performance.md, figures moved from code comments).
const plainSegment = 2 << 20

// zop is one step of a job's result, applied in order.
type zop struct {
	kind      uint8  // zPlain, zCompressed, or one of the tail kinds below
	length    uint32 // decompressed bytes
	blocks    uint16 // physical blocks (zPlain, zCompressed)
	padBefore uint32 // zeros before the bytes (the 0padding of a pcluster)
	off, n    int    // the bytes, in the job's buffer
}

// Tail kinds: the last extent of a file, decided by the worker as far as it
// can; the rest is settled when the job is applied.
const (
	zopFragment    = 10 + iota // bytes go to the packed inode
	zopInlineZ                 // compressed tail inline after the index
	zopInlinePlain             // uncompressed tail inline after the index
	// zopFlatTail: this job's extents are all plain and the tail does not
	// compress. If the file's earlier segments are all plain too, the
	// file becomes FLAT (flatTail); otherwise the tail is stored inline
	// uncompressed if it fits, else as a plain block.
	zopFlatTail
)

// zjob is one segment of one file.
type zjob struct {
	ino  *inode
	zf   *zfile // shared by the segments of a file
	path string // for errors
	data []byte // the input; the worker compacts its output into it
	base uint64 // logical offset of data[0] in the file
	// src, if set, is where the worker reads the input from (at base):
	// the file came as DataAt, so the caller copies none of it. The worker
	// reads it a window at a time and data only takes the output (ring
	// pages the output does not reach stay untouched). err is what went
	// wrong reading it, returned when j is applied.
	src  *io.SectionReader
	err  error
	last bool // the file's last segment
	frag bool // the last extent may become a fragment

	// Captured when the job is made, so the result does not depend on
	// when it is applied: the largest inline tail of the compressed
	// layouts and of the flat one (inlineRoom); -1 for none.
	inlineZ, inlineFlat int
	// hash: the worker takes the xxhash64 of the input, sum, for
	// whole-file dedupe (zpipe.dupOf).
	hash bool
	sum  uint64
	// plain: the file is stored uncompressed; the worker only hashes
	// (Builder.writePlain).
	plain bool
	// With extent dedupe, the worker leaves data as it is, writes its
	// output to out and finds the anchors of data (zdedupe.go).
	out     []byte
	anchors []anchor
	flat    bool // applied: the file became flat (zopFlatTail)

	ops []zop
	// done receives one value when the job is compressed. It is made once
	// per zjob (jobs are reused) with room for that value, so the one who
	// finishes never blocks; whoever receives it sets received.
	done     chan struct{}
	received bool
}

// finished signals that j is compressed.
func (j *zjob) finished() { j.done <- struct{}{} }

// zpipe is the pipeline of one Builder.
type zpipe struct {
	z       *zwriter
	bs      int
	blkbits uint
	workers int
	jobs    chan *zjob // to the workers and the caller
	big     chan *zjob // jobs of bigJob bytes or more: to the workers only
	wg      sync.WaitGroup

	self    *zworker // the caller's compressor, for wait
	pending []*zjob  // submitted, not yet applied, in input order
	free    []*zjob  // applied, for job
	ring    *zring   // their buffers
	// releases are the ring buffers of applied jobs, oldest first, that
	// the output still reads (release).
	releases []ringRelease
	anchors  [][]anchor     // reused anchor lists
	sums     *xxhash.Digest // the sums of the current file's segments (dupOf)
}

// inflightJobsPerWorker bounds the jobs submitted and not yet applied
// besides the ring's room. Small files make small jobs, and a low bound
// makes the writer apply a few at a time and the workers park and wake for
// each. A high one costs no memory: a job's output stays in its ring
// buffer (docs/performance.md has the figures).
const inflightJobsPerWorker = 512

// maxPending is how many jobs may be submitted and not yet applied. One
// worker is the caller alone: it compresses each job when the next file
// needs a buffer, so a file is compressed while its data is still in the
// CPU's caches, and the ring touches no more memory than the largest
// file or segment (TestOneWorkerRing).
func (p *zpipe) maxPending() int {
	if p.workers == 1 {
		return 1
	}
	return cap(p.jobs)
}

func newZpipe(z *zwriter, bs int, blkbits uint, workers int) *zpipe {
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	return &zpipe{z: z, bs: bs, blkbits: blkbits, workers: workers}
}

// ringSize is the memory for the input of the jobs in flight: a segment
// per worker (the caller is one). One more would let the caller read the
// next segment of a big file while both compress: a little faster on big
// files with the slower codecs, no faster elsewhere, and as big files fill
// the whole ring wherever they are, a segment more of peak RSS on every
// build (docs/performance.md has the figures). With extent dedupe a job
// also has an output buffer: two more segments, so that a job's two
// buffers always fit beside each other once older jobs are applied,
// wherever the ring stands.
func (p *zpipe) ringSize() int {
	n := p.workers
	if p.z != nil && p.z.dd != nil {
		n += 2
	}
	return n * p.segment()
}

// segment is the segment size: at least one extent, whole blocks.
func (p *zpipe) segment() int {
	if p.z == nil {
		return plainSegment
	}
	s := max(segmentSize, p.z.maxExtent)
	return (s + p.bs - 1) / p.bs * p.bs
}

func (p *zpipe) start() {
	if p.jobs != nil {
		return
	}
	p.jobs = make(chan *zjob, p.workers*inflightJobsPerWorker)
	p.big = make(chan *zjob, p.workers*inflightJobsPerWorker)
	// The caller is one of the workers: whenever it would wait for a job,
	// it compresses queued ones itself (wait). So N workers are N-1
	// goroutines and the caller, and the goroutine that reads the input
	// and writes the results never waits for a CPU behind N compressing
	// ones (on two CPUs that wait was most of a build's time).
	// The caller's worker uses the zwriter's encoder, which otherwise
	// only makes the config record: everything the caller runs is
	// sequential, and an encoder's tables are memory saved.
	p.self = p.newWorker(p.compressor(true))
	for range p.workers - 1 {
		w := p.newWorker(p.compressor(false))
		p.wg.Go(func() { w.serve(p.jobs, p.big) })
	}
	// But the caller never takes a big job (segments of big files): while
	// it compressed one, the worker that finished the other found nothing
	// queued, as the ring, a segment per worker, had no room for the caller
	// to read the next. One more goroutine takes big jobs only, so N of
	// them compress a big file while the caller reads and writes: faster
	// on big files, the same elsewhere (docs/performance.md).
	if p.workers > 1 {
		w := p.newWorker(p.compressor(false))
		p.wg.Go(func() { w.serve(nil, p.big) })
	}
}

// bigJob is the size from which a job goes to the workers only (big).
const bigJob = 1 << 20

// serve runs the jobs of both channels (a nil one is never ready) until
// they are closed.
func (w *zworker) serve(jobs, big chan *zjob) {
	for jobs != nil || big != nil {
		var j *zjob
		var ok bool
		select {
		case j, ok = <-jobs:
			if !ok {
				jobs = nil
				continue
			}
		case j, ok = <-big:
			if !ok {
				big = nil
				continue
			}
		}
		w.run(j)
		w.bytes += int64(len(j.data))
		j.finished()
	}
}

// compressor is a worker's compressor: the zwriter's for the caller's
// (self), else a new one; none in a pipeline of uncompressed files.
func (p *zpipe) compressor(self bool) compressor {
	if p.z == nil {
		return nil
	}
	if self {
		return p.z.comp
	}
	comp, _ := p.z.c.newCompressor() // validated by newZwriter
	return comp
}

func (p *zpipe) newWorker(comp compressor) *zworker {
	w := &zworker{p: p, comp: comp}
	if p.z != nil {
		w.dst = make([]byte, p.z.pcluster)
	}
	return w
}

// wait returns when j is done, compressing queued jobs meanwhile.
func (p *zpipe) wait(j *zjob) {
	for !j.received {
		select {
		case <-j.done:
			j.received = true
			return
		default:
		}
		select {
		case k := <-p.jobs:
			p.self.run(k)
			p.self.bytes += int64(len(k.data))
			k.finished()
		case <-j.done:
			j.received = true
		}
	}
}

// stop ends the workers once the jobs sent are done.
func (p *zpipe) stop() {
	if p.jobs != nil {
		close(p.jobs)
		close(p.big)
		p.wg.Wait()
		p.jobs = nil
	}
	// No job is running now: the buffers the pending ones hold in the
	// ring go with it.
	if p.ring != nil {
		p.pending, p.releases = nil, nil
		p.ring.release()
		p.ring = nil
	}
}

// buffer returns a buffer of n bytes (at most a segment) from the ring,
// first applying the oldest jobs while too many are in flight or the ring
// has no room.
func (p *zpipe) buffer(b *Builder, n int) ([]byte, error) {
	if p.ring == nil {
		p.ring = newZring(p.ringSize())
	}
	for len(p.pending) > 0 && len(p.pending) >= p.maxPending() {
		if err := p.applyHead(b); err != nil {
			return nil, err
		}
	}
	for {
		p.reclaim(b)
		if buf := p.ring.take(n); buf != nil {
			return buf, nil
		}
		if len(p.releases) > 0 {
			// The oldest buffers are applied and wait for the output.
			if err := b.out.WaitWritten(p.releases[0].mark); err != nil {
				return nil, err
			}
			continue
		}
		if len(p.pending) == 0 {
			return nil, fmt.Errorf("erofs: no room for a %d-byte segment in a %d-byte ring", n, len(p.ring.buf))
		}
		if err := p.applyHead(b); err != nil {
			return nil, err
		}
	}
}

func (p *zpipe) submit(j *zjob) {
	p.start()
	if j.done == nil {
		j.done = make(chan struct{}, 1)
	}
	p.pending = append(p.pending, j)
	if p.workers > 1 && len(j.data) >= bigJob {
		p.big <- j
		return
	}
	p.jobs <- j
}

// dupOf folds a hashed job's sum into its file's key and, once the file's
// last job is applied (its result not yet written), returns the earlier
// file with that key and the same content that the file can share
// (Builder.dupOf). Jobs are applied in input order, a file's one after
// another, so one running hash serves every file. The key of a file of one
// segment is the hash of its bytes, as for an uncompressed file; of a
// longer one, the hash of its segments' hashes (files with the same
// content have the same segments).
func (p *zpipe) dupOf(b *Builder, j *zjob) (*inode, error) {
	if !j.hash {
		return nil, nil
	}
	sum := j.sum
	if j.base > 0 || !j.last {
		if j.base == 0 {
			if p.sums == nil {
				p.sums = xxhash.New()
			}
			p.sums.Reset()
		}
		var s [8]byte
		le.PutUint64(s[:], j.sum)
		p.sums.Write(s[:])
		if !j.last {
			return nil, nil
		}
		sum = p.sums.Sum64()
	}
	// The file as stored so far (earlier segments), then this job's
	// result.
	ino := j.ino
	var content pieces
	if j.plain {
		done := (b.outBlk - uint64(ino.startBlk)) << b.blkbits
		content = concat(b.blockPieces(uint64(ino.startBlk), done), onePiece(j.data))
	} else {
		content = b.zPieces(j.zf.extents, j.zf, ino.startBlk, j)
	}
	return b.dupOf(newDupKey(sum, ino.size), ino, j.inlineZ, j.inlineFlat, content)
}

// applyHead waits for the oldest job and writes its result.
func (p *zpipe) applyHead(b *Builder) error {
	j := p.pending[0]
	p.pending[0] = nil
	p.pending = p.pending[1:]
	p.wait(j)
	err := b.apply(j)
	n := 1 // j.data
	if j.out != nil {
		n++
		p.anchors = append(p.anchors, j.anchors[:0])
	}
	p.release(b, j, n)
	if err != nil {
		return &EntryError{Path: j.path, Err: err}
	}
	*j = zjob{ops: j.ops[:0], done: j.done}
	p.free = append(p.free, j)
	return nil
}

// job returns a job to fill: an applied one, with its ops' memory, if any.
// A layer of small files made a job, and the job its ops, per file.
func (p *zpipe) job() *zjob {
	if k := len(p.free); k > 0 {
		j := p.free[k-1]
		p.free = p.free[:k-1]
		return j
	}
	return new(zjob)
}

// ringRelease is n ring buffers to give back once the output is written
// up to mark.
type ringRelease struct {
	mark int64
	n    int
}

// release gives back the n ring buffers of j, just applied, once the
// output has written what it took from them by reference: applyOp hands
// the compressed and plain extents to the output as they are in the ring,
// and the writer's pwritev copies them into the page cache. Copied into
// the output's buffer first, they were read by the CPU that lays out the
// image right after the CPU that compressed them had written them: with
// more than one worker that copy cost several times what it did on one,
// on the path every byte takes through the caller (docs/performance.md,
// the build pipeline).
// A job copied into the output goes back with the one before it, as the
// ring is given back in order; at once if none waits.
func (p *zpipe) release(b *Builder, j *zjob, n int) {
	k := len(p.releases)
	switch {
	case p.refs(j):
		p.releases = append(p.releases, ringRelease{mark: b.out.LastRef(), n: n})
		p.reclaim(b)
	case k > 0:
		p.releases[k-1].n += n
	default:
		for range n {
			p.ring.give()
		}
	}
}

// refs reports whether j's extents go to the output by reference (release).
//
// With one worker they are copied: the caller compresses each job as it
// reads it, and a ring whose buffers come back at once stays in the CPU's
// caches, where the copy is cheap (and the ring touches no more memory
// than the largest file: TestOneWorkerRing). The segments of big files
// are copied too: the output's one writer is then the slowest stage (a
// file that does not compress is written as fast as the page cache takes
// it), and ring buffers held until it has written them would leave the
// workers without input.
func (p *zpipe) refs(j *zjob) bool {
	return p.workers > 1 && len(j.data) < bigJob
}

// reclaim gives back the ring buffers whose output is written.
func (p *zpipe) reclaim(b *Builder) {
	if len(p.releases) == 0 {
		return
	}
	b.out.Collect()
	i := 0
	for ; i < len(p.releases) && p.releases[i].mark <= b.out.Written(); i++ {
		for range p.releases[i].n {
			p.ring.give()
		}
	}
	if i > 0 {
		p.releases = p.releases[:copy(p.releases, p.releases[i:])]
	}
}

// drain applies every pending job.
func (p *zpipe) drain(b *Builder) error {
	for len(p.pending) > 0 {
		if err := p.applyHead(b); err != nil {
			return err
		}
	}
	return nil
}

// applyDone applies the jobs at the head that are finished, without
// waiting, so the output keeps up with the workers.
func (p *zpipe) applyDone(b *Builder) error {
	for len(p.pending) > 0 {
		select {
		case <-p.pending[0].done:
			p.pending[0].received = true
			if err := p.applyHead(b); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	return nil
}

// writeCompressed reads a regular file segment by segment and hands the
// segments to the workers. The file falls back to the flat layout when no
// extent of it saves a block.
func (b *Builder) writeCompressed(path string, ino *inode, r io.Reader, fragments bool) error {
	p := b.zp
	size := ino.size
	zf := &zfile{big: b.z.big}
	if z := b.z; z.c.Dedupe && z.dd == nil {
		// Dedupe reads pclusters back: without a readable output it is off.
		r, ok := b.w.(io.ReaderAt)
		if !ok {
			z.c.Dedupe = false
		} else {
			dd, err := newZdedupe(z, r)
			if err != nil {
				return err
			}
			z.dd = dd
		}
	}
	inlineFlat, inlineZ := b.inlineRoom(ino)
	// Whole-file dedupe needs the file's hash: the workers take it, a
	// segment each (zworker.run), and the file's key is made of theirs
	// when its last segment is applied (zpipe.dupOf), so the caller hashes
	// nothing. Hashed by the caller, every byte of the input went through
	// its one CPU, the build's bottleneck (docs/performance.md).
	hashed := b.dedupes() && !b.z.packing
	t := zjob{ino: ino, zf: zf, path: path, frag: fragments, hash: hashed, inlineZ: inlineZ, inlineFlat: inlineFlat}
	// With extent dedupe the input stays for the decisions at apply time.
	return p.split(b, r, size, t, b.z.dd != nil && !b.z.packing)
}

// split cuts a file of size bytes into segments and submits a job made
// from t for each: its input in a buffer of the ring, read from r unless r
// is DataAt (then the worker that takes the job reads it); withOut, an
// output buffer beside it.
func (p *zpipe) split(b *Builder, r io.Reader, size uint64, t zjob, withOut bool) error {
	var src *io.SectionReader
	if d, ok := r.(dataAt); ok {
		src = d.SectionReader
	}
	seg := uint64(p.segment())
	for base := uint64(0); base < size; base += seg {
		n := int(min(seg, size-base))
		buf, err := p.buffer(b, n)
		if err != nil {
			return err
		}
		if src == nil {
			if m, err := io.ReadFull(r, buf[:n]); err != nil {
				return shortData(int64(base)+int64(m), size, err)
			}
		}
		j := p.job()
		ops, done := j.ops[:0], j.done
		*j = t
		j.data, j.base, j.src, j.last = buf[:n], base, src, base+uint64(n) == size
		j.ops, j.done = ops, done
		if withOut {
			if j.out, err = p.buffer(b, n); err != nil {
				return err
			}
			if k := len(p.anchors); k > 0 {
				j.anchors, p.anchors = p.anchors[k-1], p.anchors[:k-1]
			} else {
				j.anchors = make([]anchor, 0, 64)
			}
		}
		p.submit(j)
	}
	return p.applyDone(b)
}

// put records a step whose bytes, src, go to data[out:] (never ahead of
// the input still to read), or to j.out, and returns where the next
// step's bytes go.
func (j *zjob) put(out int, kind uint8, length, blocks, padBefore int, src []byte) int {
	if j.out != nil {
		copy(j.out[out:], src)
	} else {
		copy(j.data[out:], src)
	}
	j.ops = append(j.ops, zop{kind: kind, length: uint32(length), blocks: uint16(blocks), padBefore: uint32(padBefore), off: out, n: len(src)})
	return out + len(src)
}

// zworker compresses jobs with its own compressor.
type zworker struct {
	p    *zpipe
	comp compressor
	dst  []byte // one pcluster
	// alt and small take the compression of a file's tail again
	// (fillTail): one pcluster and one block.
	alt, small []byte
	bytes      int64 // input compressed, for tests

	// The window of a job's input read from its src: win holds the
	// segment's bytes from winOff.
	win    []byte
	winOff int
}

// windowSize is the input a worker reads at a time from a job's src: a
// few extents, so that a read serves several pclusters; 0 when that is
// not much less than a segment (the default 1 MiB extents), and the worker
// reads the whole segment into the job's buffer.
func (p *zpipe) windowSize() int {
	n := max(256<<10, 4*p.z.maxExtent)
	if n > p.segment()/4 {
		return 0
	}
	return n
}

// in returns the job's input from pos to end (at most an extent apart, and
// a window is four), valid until the next call. A read error goes to
// j.err, and the job ends there.
func (w *zworker) in(j *zjob, pos, end int) []byte {
	if j.src == nil {
		return j.data[pos:end]
	}
	if pos >= w.winOff && end <= w.winOff+len(w.win) {
		return w.win[pos-w.winOff : end-w.winOff]
	}
	if w.win == nil {
		w.win = make([]byte, 0, w.p.windowSize())
	}
	// Keep what is still ahead, read the rest.
	keep := 0
	if pos >= w.winOff && pos < w.winOff+len(w.win) {
		keep = copy(w.win, w.win[pos-w.winOff:])
	}
	n := min(cap(w.win), len(j.data)-pos)
	m, err := j.src.ReadAt(w.win[keep:n], int64(j.base)+int64(pos+keep))
	if keep+m < n {
		w.win, w.winOff = w.win[:0], 0
		j.err = shortData(int64(j.base)+int64(pos+keep+m), j.ino.size, err)
		return nil
	}
	w.win, w.winOff = w.win[:n], pos
	return w.win[:end-pos]
}

// run cuts a segment into extents, as many bytes per pcluster as fit. Input
// whose pcluster would save no block is stored plain (one block of input in
// each block, an extent of its own). The output is compacted into the front
// of j.data: it never overtakes the input still there, since every pcluster
// written is shorter than the input it stands for.
func (w *zworker) run(j *zjob) {
	bs := w.p.bs
	z := w.p.z
	data := j.data
	j.ops = j.ops[:0]
	w.win, w.winOff = w.win[:0], 0
	if j.src != nil && (j.out != nil || j.hash || w.p.windowSize() == 0) {
		// The whole segment: dedupe finds the anchors of all the input
		// first, the hash is of all of it, and long extents need a window
		// as large.
		if n, err := j.src.ReadAt(data, int64(j.base)); n < len(data) {
			j.err = shortData(int64(j.base)+int64(n), j.ino.size, err)
			return
		}
		j.src = nil
	}
	if j.hash {
		// Before compressing: the output overwrites data.
		j.sum = xxhash.Sum64(data)
	}
	if j.plain {
		return
	}
	if j.out != nil {
		j.anchors = findAnchors(j.anchors[:0], data)
	}
	pos, out := 0, 0
	tailLimit := bs
	if j.last && j.frag {
		tailLimit = max(tailLimit, z.pcluster)
	}
	var wn, c int // the last compression of data[pos:]
	for {
		end := min(pos+z.maxExtent, len(data))
		win := w.in(j, pos, end)
		if j.err != nil {
			return
		}
		last := end == len(data)
		if last && len(win) <= tailLimit {
			wn, c = -1, 0
			break
		}
		wn, c = w.comp.CompressDestSize(w.dst, win)
		if j.last && last && c == len(win) {
			break // the file's tail: decided below
		}
		nblk := (wn + bs - 1) / bs
		if c == 0 || nblk*bs >= c {
			// What the pcluster would hold does not shrink: store it as
			// plain blocks (each its own extent) and compress again after.
			for i := range max(1, c/bs) {
				out = j.put(out, zPlain, bs, 1, 0, win[i*bs:(i+1)*bs])
			}
			pos += max(1, c/bs) * bs
			continue
		}
		out = j.put(out, zCompressed, c, nblk, nblk*bs-wn, w.dst[:wn])
		pos += c
	}
	if !j.last {
		rest := w.in(j, pos, len(data))
		// A segment's last bytes (at most a block) are one plain extent;
		// the next segment starts a new lcluster.
		if len(rest) > 0 {
			j.put(out, zPlain, len(rest), 1, 0, rest)
		}
		return
	}
	w.tail(j, pos, out, wn, c)
}

// tail stores the last extent of a file, data[pos:], whose compression
// (wn, c) is at hand unless wn < 0.
func (w *zworker) tail(j *zjob, pos, out, wn, c int) {
	bs := w.p.bs
	data := j.data
	size := j.base + uint64(len(data))
	rest := w.in(j, pos, len(data))
	if j.err != nil {
		return
	}
	lastLcn := (size - 1) >> w.p.blkbits
	allPlain := true
	for _, op := range j.ops {
		allPlain = allPlain && op.kind == zPlain
	}
	if j.frag {
		j.put(out, zopFragment, len(rest), 0, 0, rest)
		return
	}
	tailPacking := w.p.z.c.TailPacking
	for pos < len(data) {
		rest = rest[len(rest)-(len(data)-pos):]
		// An extent starting in the file's last block is stored
		// compressed only inline: without tail packing, compressing it
		// is wasted (every file of a block or less, in a layer of small
		// files).
		inLast := (j.base+uint64(pos))>>w.p.blkbits == lastLcn
		if wn < 0 && (tailPacking || !inLast) {
			wn, c = w.comp.CompressDestSize(w.dst, rest)
		}
		if wn >= 0 {
			whole := c == len(rest)
			if tailPacking && whole && wn < len(rest) && wn < bs && wn <= j.inlineZ {
				j.put(out, zopInlineZ, len(rest), 0, 0, w.dst[:wn])
				return
			}
			if whole && !inLast && tailPacking && wn > bs && wn%bs != 0 && w.fillTail(j, out, rest, wn/bs) {
				return
			}
			nblk := (wn + bs - 1) / bs
			if whole && nblk*bs < c && !inLast {
				j.put(out, zCompressed, c, nblk, nblk*bs-wn, w.dst[:wn])
				return
			}
		}
		n := min(bs, len(rest))
		if allPlain && n == len(rest) {
			j.put(out, zopFlatTail, n, 0, 0, rest)
			return
		}
		if tailPacking && n == len(rest) && n <= j.inlineZ {
			j.put(out, zopInlinePlain, n, 0, 0, rest)
			return
		}
		out = j.put(out, zPlain, n, 1, 0, rest[:n])
		pos += n
		wn = -1
	}
}

// fillTail stores the last extent of a file, rest, whose compressed form
// ends in a partly filled block, as a pcluster of exactly nblk blocks (as
// much of rest as they hold) and the bytes left over as the inline tail,
// compressed if that is smaller. It stores nothing and reports false when
// the leftover does not go inline: rest is then stored as before, in
// nblk+1 blocks or plain. mkfs.erofs fills the last pcluster the same way
// (TestTailFillsBlocks).
func (w *zworker) fillTail(j *zjob, out int, rest []byte, nblk int) bool {
	bs := w.p.bs
	if w.alt == nil {
		w.alt = make([]byte, len(w.dst))
		w.small = make([]byte, bs)
	}
	wn, c := w.comp.CompressDestSize(w.alt[:nblk*bs], rest)
	if wn <= 0 || c >= len(rest) || nblk*bs >= c {
		return false
	}
	left := rest[c:]
	tn, tc := w.comp.CompressDestSize(w.small[:bs-1], left)
	kind, tail := uint8(zopInlineZ), w.small[:tn]
	if tn <= 0 || tc < len(left) || tn >= len(left) || tn > j.inlineZ {
		if len(left) > bs || len(left) > j.inlineZ {
			return false
		}
		kind, tail = zopInlinePlain, left
	}
	// The pcluster's bytes end before left starts (nblk*bs < c), so the
	// copy into the job's buffer leaves left as it is.
	out = j.put(out, zCompressed, c, nblk, nblk*bs-wn, w.alt[:wn])
	j.put(out, kind, len(left), 0, 0, tail)
	return true
}

// apply writes a finished job's result to the output and records its
// extents; the file's last job completes its inode.
func (b *Builder) apply(j *zjob) error {
	if j.err != nil {
		return j.err
	}
	if j.plain {
		return b.applyPlain(j)
	}
	ino := j.ino
	if j.base == 0 {
		ino.startBlk = uint32(b.outBlk)
		if j.zf.extents == nil && ino.size >= presizeExtents {
			j.zf.extents = make([]zextent, 0, extentsFor(ino.size, b.blkbits))
		}
	}
	orig, err := b.zp.dupOf(b, j)
	if err != nil {
		return err
	}
	if orig != nil {
		// The file shares orig's data; what its segments wrote is
		// rewound over.
		start := uint64(ino.startBlk)
		if dd := b.z.dd; dd != nil {
			dd.forget(start)
		}
		b.share(ino, orig)
		return b.rewind(start)
	}
	if j.out != nil {
		return b.applyDedupe(j)
	}
	for _, op := range j.ops {
		if err := b.applyOp(j, op, j.opBytes(op), b.zp.refs(j)); err != nil {
			return err
		}
	}
	return b.applied(j)
}

// applied completes the inode after the file's last job, unless the file
// turned out flat.
func (b *Builder) applied(j *zjob) error {
	if j.last && !j.flat {
		return b.zDone(j.ino, j.zf)
	}
	return nil
}

// opBytes are the bytes of one step of a job's result.
func (j *zjob) opBytes(op zop) []byte {
	if j.out != nil {
		return j.out[op.off : op.off+op.n]
	}
	return j.data[op.off : op.off+op.n]
}

// applyOp writes one step of a job's result, whose bytes are p. With ref,
// p stays in the ring until the output is written (zpipe.release), and
// the output takes it without a copy.
func (b *Builder) applyOp(j *zjob, op zop, p []byte, ref bool) error {
	z := b.z
	zf := j.zf
	switch op.kind {
	case zPlain, zCompressed:
		if err := b.writeZeros(uint64(op.padBefore)); err != nil {
			return err
		}
		if err := b.writeMaybeRef(p, ref); err != nil {
			return err
		}
		if op.kind == zPlain {
			if err := b.padBlock(uint64(len(p))); err != nil {
				return err
			}
		} else {
			b.outBlk += uint64(op.blocks)
		}
		if op.blocks > 1 {
			z.usedBig = true
		}
		zf.extents = append(zf.extents, zextent{length: op.length, blocks: op.blocks, kind: op.kind})
		zf.blocks += uint32(op.blocks)
		if b.outBlk >= 1<<32 {
			return fmt.Errorf("image would exceed 2^32 blocks")
		}
	case zopFragment:
		if err := z.appendFragment(b, p); err != nil {
			return err
		}
		zf.fragOff = z.packedLen - uint64(len(p))
		zf.extents = append(zf.extents, zextent{length: op.length, kind: zFragment})
	case zopFlatTail:
		// The blocks written are the file's data, in order, only if
		// every extent is plain and none is another's pcluster.
		allPlain := true
		for _, e := range zf.extents {
			allPlain = allPlain && e.kind == zPlain && e.share == 0
		}
		if allPlain {
			j.flat = true
			return b.flatTail(j.ino, p, len(p) <= j.inlineFlat)
		}
		if z.c.TailPacking && len(p) <= j.inlineZ {
			return b.inlineTail(zf, p, op.length, true)
		}
		if err := b.writePadded(p); err != nil {
			return err
		}
		zf.extents = append(zf.extents, zextent{length: op.length, blocks: 1, kind: zPlain})
		zf.blocks++
	case zopInlineZ, zopInlinePlain:
		return b.inlineTail(zf, p, op.length, op.kind == zopInlinePlain)
	}
	return nil
}

// inlineTail spools the last extent of a file to go inline after its index.
func (b *Builder) inlineTail(zf *zfile, p []byte, length uint32, plain bool) error {
	ref, err := b.spoolTail(p)
	if err != nil {
		return err
	}
	zf.inline, zf.plainIn = ref, plain
	zf.extents = append(zf.extents, zextent{length: length, kind: zInline})
	b.z.inlined = true
	return nil
}
