package erofs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// TestZring takes and gives back buffers of random sizes in FIFO order, the
// way the pipeline does, and checks that buffers in use never overlap,
// keep their contents, and that a buffer always fits once the ring is empty.
func TestZring(t *testing.T) {
	const size = 1 << 12
	r := newZring(size)
	defer r.release()
	rnd := rand.New(rand.NewPCG(1, 2))
	type live struct {
		b   []byte
		tag byte
	}
	var q []live
	var tag byte
	taken, wrapped := 0, 0
	for i := 0; i < 200000; i++ {
		if len(q) > 0 && (rnd.IntN(3) == 0 || len(q) > 40) {
			for _, c := range q[0].b {
				if c != q[0].tag {
					t.Fatalf("step %d: a buffer in use was overwritten", i)
				}
			}
			q = q[1:]
			r.give()
			continue
		}
		n := 1 + rnd.IntN(size/3)
		if rnd.IntN(10) == 0 {
			n = size // a whole segment
		}
		b := r.take(n)
		if b == nil {
			if len(q) == 0 {
				t.Fatalf("step %d: no room for %d bytes in an empty ring", i, n)
			}
			// The free bytes, from where the buffers in use lie: after
			// the newest and before the oldest, or between the newest
			// and the oldest once wrapped. A refusal must be right.
			oldest := offsetIn(r.buf, q[0].b)
			newest := offsetIn(r.buf, q[len(q)-1].b) + len(q[len(q)-1].b)
			fits := n <= oldest-newest
			if newest > oldest {
				fits = n <= size-newest || n <= oldest
			}
			if fits {
				t.Fatalf("step %d: no room for %d bytes with the buffers in use in [%d, %d)", i, n, oldest, newest)
			}
			continue
		}
		if len(b) != n || cap(b) != n {
			t.Fatalf("step %d: took %d bytes (cap %d), want %d", i, len(b), cap(b), n)
		}
		if &b[0] == &r.buf[0] && len(q) > 0 {
			wrapped++
		}
		tag++
		for k := range b {
			b[k] = tag
		}
		q = append(q, live{b, tag})
		taken++
		if r.inUse() != len(q) {
			t.Fatalf("step %d: %d buffers in use, want %d", i, r.inUse(), len(q))
		}
	}
	if taken < 10000 || wrapped < 100 {
		t.Errorf("the test took %d buffers and wrapped %d times: too few to mean anything", taken, wrapped)
	}
	if len(r.ends) > 200 {
		t.Errorf("the list of buffers in use has %d entries for at most 41 in use: it is not compacted", len(r.ends))
	}
}

// TestZringWrappedTail: once the buffers before a wrap are given back, the
// tail is the start of the wrapped buffer, not the end of the last one
// given back. It was the end: with extent dedupe a job's output buffer then
// found no room beside its own input in an otherwise empty ring ("no room
// for a 24528-byte segment in a 16777216-byte ring" on the Linux tree).
func TestZringWrappedTail(t *testing.T) {
	r := newZring(100)
	defer r.release()
	a, b := r.take(40), r.take(40) // [0,40) [40,80)
	if a == nil || b == nil {
		t.Fatal("no room in an empty ring")
	}
	r.give()        // a
	c := r.take(30) // wraps: [0,30)
	if c == nil || &c[0] != &r.buf[0] {
		t.Fatal("the buffer did not wrap to the front")
	}
	r.give() // b: only c is in use
	if d := r.take(60); d == nil {
		t.Fatalf("no room for 60 bytes beside 30 in use in a 100-byte ring (head %d, tail %d)", r.head, r.tail)
	} else if &d[0] != &r.buf[30] {
		t.Fatal("the buffer is not after the one in use")
	}
}

// offsetIn is where b starts in buf.
func offsetIn(buf, b []byte) int {
	return int(uintptr(unsafe.Pointer(&b[0])) - uintptr(unsafe.Pointer(&buf[0])))
}

// TestOneWorkerRing: with one worker, each small file is compressed before
// the next one is read, so the ring touches no more than the largest file,
// not the data of hundreds of files in flight.
func TestOneWorkerRing(t *testing.T) {
	b, err := NewBuilder(&memWriterAt{}, Options{Workers: 1, Compression: &Compression{Algorithm: AlgLZ4}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	data := make([]byte, 6000)
	for i := range 500 {
		for k := range data {
			data[k] = byte(i + k/7)
		}
		e := Entry{Path: fmt.Sprintf("f%03d", i), Mode: S_IFREG | 0o644, Size: int64(len(data))}
		if err := b.Add(e, bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	if peak := b.zp.ring.peak; peak > 2*len(data) {
		t.Errorf("one worker touched %d bytes of the ring for files of %d bytes", peak, len(data))
	}
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
}

// TestBigJobsSkipTheCaller: with several workers, the caller compresses
// small files while it waits, but never a segment of a big file; alone,
// it compresses everything.
func TestBigJobsSkipTheCaller(t *testing.T) {
	big := make([]byte, 3*segmentSize)
	for k := range big {
		big[k] = byte(k / 5 % 251)
	}
	small := make([]byte, 5000)
	for _, workers := range []int{1, 2, 3} {
		b, err := NewBuilder(&memWriterAt{}, Options{Workers: workers, NoDedupe: true, Compression: &Compression{Algorithm: AlgLZ4}})
		if err != nil {
			t.Fatal(err)
		}
		total := int64(0)
		for i := range 3 {
			for _, data := range [][]byte{small, big} {
				e := Entry{Path: fmt.Sprintf("f%d-%d", i, len(data)), Mode: S_IFREG | 0o644, Size: int64(len(data))}
				if err := b.Add(e, bytes.NewReader(data)); err != nil {
					t.Fatal(err)
				}
				total += int64(len(data))
			}
		}
		if err := b.Finish(); err != nil {
			t.Fatal(err)
		}
		self := b.zp.self.bytes
		if workers == 1 && self != total {
			t.Errorf("one worker: the caller compressed %d bytes of %d", self, total)
		}
		if workers > 1 && self > 3*int64(len(small)) {
			t.Errorf("%d workers: the caller compressed %d bytes, more than the small files' %d", workers, self, 3*len(small))
		}
	}
}

// TestExtentsSized: a compressed file's extent list is made for the most
// extents it can have, and kept no bigger than its extents need.
func TestExtentsSized(t *testing.T) {
	for _, workers := range []int{1, 2} {
		b, err := NewBuilder(&memWriterAt{}, Options{Workers: workers, NoDedupe: true, Compression: &Compression{Algorithm: AlgLZ4}})
		if err != nil {
			t.Fatal(err)
		}
		text := make([]byte, 3<<20)
		for k := range text {
			text[k] = "erofs pcluster lz4 "[k*7/5%19] + byte(k/4096%3)
		}
		if err := b.Add(Entry{Path: "text", Mode: S_IFREG | 0o644, Size: int64(len(text))}, bytes.NewReader(text)); err != nil {
			t.Fatal(err)
		}
		if err := b.zp.drain(b); err != nil {
			t.Fatal(err)
		}
		zf := b.lookup("text").ino.z
		if zf == nil {
			t.Fatal("text is not compressed")
		}
		n, c := len(zf.extents), cap(zf.extents)
		if n == 0 || n > len(text)/4096/2 || c > n+n/4+4 {
			t.Errorf("workers %d: %d extents kept in room for %d (for %d blocks of input)", workers, n, c, len(text)/4096)
		}
		if got := extentsFor(uint64(len(text)), 12); got != len(text)/4096+2 {
			t.Errorf("extentsFor(3 MiB) = %d", got)
		}
		if got := extentsFor(1<<40, 12); got != maxExtentsAtOnce {
			t.Errorf("extentsFor(1 TiB) = %d", got)
		}
		if err := b.Finish(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPipelineFreedBeforeMeta: once the data is written, the ring and the
// workers are gone before the metadata is laid out, and the image is whole.
func TestPipelineFreedBeforeMeta(t *testing.T) {
	w := &memWriterAt{}
	b, err := NewBuilder(w, Options{Workers: 2, Compression: &Compression{Algorithm: AlgLZ4}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	data := make([]byte, 3*segmentSize/2)
	for k := range data {
		data[k] = byte(k / 9 % 200)
	}
	for i := range 50 {
		n := len(data) >> (i % 12)
		if err := b.Add(Entry{Path: fmt.Sprintf("f%02d", i), Mode: S_IFREG | 0o644, Size: int64(n)}, bytes.NewReader(data[:n])); err != nil {
			t.Fatal(err)
		}
	}
	ran := false
	testHookMeta = func(b *Builder) {
		ran = true
		if b.zp.ring != nil || b.zp.jobs != nil {
			t.Errorf("the pipeline still holds its ring (%v) or workers (%v) when the metadata is laid out", b.zp.ring != nil, b.zp.jobs != nil)
		}
		if n := b.out.Buffered(); n != 0 {
			t.Errorf("%d bytes of data not written before the metadata", n)
		}
	}
	defer func() { testHookMeta = nil }()
	if err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	if !ran {
		t.Fatal("the hook did not run")
	}
	img, err := Open(bytes.NewReader(w.b), int64(len(w.b)))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		got, err := img.ReadFile(fmt.Sprintf("f%02d", i))
		if n := len(data) >> (i % 12); err != nil || !bytes.Equal(got, data[:n]) {
			t.Fatalf("f%02d: %d bytes, %v", i, len(got), err)
		}
	}
}
