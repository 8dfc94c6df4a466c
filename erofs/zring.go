package erofs

// zring holds the input (and dedupe output) buffers of the compression
// jobs in flight: one block of memory, taken in order and given back in
// the same order, as jobs are applied in input order. A layer of 100,000
// small files then allocates nothing per file (a pool by size class
// allocated many times the ring's size, most of it garbage for the GC), and
// the memory of the pipeline is the ring, whatever the files' sizes.
//
// Buffers are contiguous: one that does not fit where the ring is free
// waits for older ones to be given back. Whatever is left between the last
// buffer and the end of the ring stays unused until the tail passes it.
type zring struct {
	buf        []byte
	head, tail int    // next free byte; start of the oldest buffer in use
	starts     []int  // start of each buffer in use, oldest first
	ends       []int  // and its end
	first      int    // index in starts and ends of the oldest
	peak       int    // the highest end yet: the bytes of buf ever touched
	free       func() // releases buf (ringMemory)
}

func newZring(size int) *zring {
	buf, free := ringMemory(size)
	return &zring{buf: buf, free: free}
}

// release returns the ring's memory; it must not be used afterwards.
func (r *zring) release() {
	r.free()
	r.buf = nil
}

// take returns n bytes, or nil if they do not fit until older buffers are
// given back. n must not exceed the ring.
func (r *zring) take(n int) []byte {
	start := -1
	switch {
	case r.inUse() == 0:
		r.head, r.tail = 0, 0
		start = 0
	case r.head > r.tail:
		// In use: [tail, head). Free: [0, tail) and [head, end). The
		// start first: the ring then stays within the bytes in flight
		// and touches no more memory than they need, while a few small
		// files are in flight.
		if n <= r.tail {
			start = 0
		} else if r.head+n <= len(r.buf) {
			start = r.head
		}
	default:
		// Wrapped, in use: [tail, end) and [0, head). Free: [head, tail).
		if r.head+n <= r.tail {
			start = r.head
		}
	}
	if start < 0 {
		return nil
	}
	r.head = start + n
	r.peak = max(r.peak, r.head)
	r.starts = append(r.starts, start)
	r.ends = append(r.ends, r.head)
	return r.buf[start:r.head:r.head]
}

// give gives back the oldest buffer taken. The tail moves to the start of
// the next oldest, which is not its end when that one wrapped to the
// front: taking the end would leave the bytes between the old head and the
// ring's end counted as in use, and refuse buffers that fit.
func (r *zring) give() {
	r.first++
	if r.first == len(r.ends) {
		r.starts, r.ends, r.first = r.starts[:0], r.ends[:0], 0
		return
	}
	r.tail = r.starts[r.first]
	if r.first >= 64 && 2*r.first >= len(r.ends) {
		r.starts = r.starts[:copy(r.starts, r.starts[r.first:])]
		r.ends = r.ends[:copy(r.ends, r.ends[r.first:])]
		r.first = 0
	}
}

func (r *zring) inUse() int { return len(r.ends) - r.first }
