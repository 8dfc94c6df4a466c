package convert

import (
	"hash"
	"io"
)

// readAhead reads its source on a goroutine of its own (and hashes it on
// another), a few chunks ahead of the consumer, so that decompressing the layer blob
// and computing its diffID overlap with parsing the tar and building the
// image. Memory: raChunks buffers of raChunkSize, raHashChunks more with
// a hash.
type readAhead struct {
	full  chan raChunk // filled by the reader goroutine, in order
	empty chan []byte  // returned by the consumer
	stop  chan struct{}
	cur   raChunk
	off   int
	done  bool
}

type raChunk struct {
	b   []byte
	err error // after b: the source's error, io.EOF at its end
}

const (
	raChunkSize = 256 << 10
	raChunks    = 4
)

// newReadAhead starts reading r, writing every byte read to h as well if h
// is not nil. h gets a goroutine of its own: on the goroutine that
// decompresses a gzip layer, the one that bounds the build, the diffID's
// sha256 came on top of the inflating (docs/performance.md, the build
// pipeline).
func newReadAhead(r io.Reader, h hash.Hash) *readAhead {
	n := raChunks
	if h != nil {
		n += raHashChunks
	}
	ra := &readAhead{
		full:  make(chan raChunk, n),
		empty: make(chan []byte, n),
		stop:  make(chan struct{}),
	}
	for range n {
		ra.empty <- make([]byte, raChunkSize)
	}
	if h == nil {
		go ra.fill(r, ra.full)
		return ra
	}
	read := make(chan raChunk, n)
	go ra.fill(r, read)
	go ra.hash(h, read)
	return ra
}

// raHashChunks are the chunks more in flight when a goroutine hashes
// them between the reader and the consumer.
const raHashChunks = 2

// fill reads r a chunk at a time into out.
func (ra *readAhead) fill(r io.Reader, out chan<- raChunk) {
	for {
		var buf []byte
		select {
		case buf = <-ra.empty:
		case <-ra.stop:
			return
		}
		n, err := readChunk(r, buf)
		select {
		case out <- raChunk{b: buf[:n], err: err}:
		case <-ra.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// readChunk fills buf from r, short only at r's end (io.EOF) or an error.
// Unlike io.ReadFull it passes r's own io.ErrUnexpectedEOF on as it is
// (a decompressor's truncated stream) rather than making an end of it.
func readChunk(r io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := r.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// hash writes the chunks of in to h and hands them on to the consumer, in
// order: h has all the bytes before the consumer sees the end.
func (ra *readAhead) hash(h hash.Hash, in <-chan raChunk) {
	for {
		var c raChunk
		select {
		case c = <-in:
		case <-ra.stop:
			return
		}
		h.Write(c.b)
		select {
		case ra.full <- c:
		case <-ra.stop:
			return
		}
		if c.err != nil {
			return
		}
	}
}

func (ra *readAhead) Read(p []byte) (int, error) {
	for ra.off == len(ra.cur.b) {
		if ra.done {
			return 0, ra.cur.err
		}
		if ra.cur.b != nil {
			ra.empty <- ra.cur.b[:cap(ra.cur.b)]
		}
		ra.cur, ra.off = <-ra.full, 0
		ra.done = ra.cur.err != nil
	}
	n := copy(p, ra.cur.b[ra.off:])
	ra.off += n
	return n, nil
}

// Close stops the reader goroutine; it returns once its current read of
// the source does.
func (ra *readAhead) Close() error {
	close(ra.stop)
	return nil
}
