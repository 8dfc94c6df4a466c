package convert

import (
	"hash"
	"io"
)

// readAhead reads its source (and hashes it) on a goroutine of its own, a
// few chunks ahead of the consumer, so that decompressing the layer blob
// and computing its diffID overlap with parsing the tar and building the
// image. Memory: raChunks buffers of raChunkSize (1 MiB).
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
// is not nil.
func newReadAhead(r io.Reader, h hash.Hash) *readAhead {
	ra := &readAhead{
		full:  make(chan raChunk, raChunks),
		empty: make(chan []byte, raChunks),
		stop:  make(chan struct{}),
	}
	for range raChunks {
		ra.empty <- make([]byte, raChunkSize)
	}
	go ra.fill(r, h)
	return ra
}

func (ra *readAhead) fill(r io.Reader, h hash.Hash) {
	for {
		var buf []byte
		select {
		case buf = <-ra.empty:
		case <-ra.stop:
			return
		}
		n, err := io.ReadFull(r, buf)
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		if h != nil {
			h.Write(buf[:n])
		}
		select {
		case ra.full <- raChunk{b: buf[:n], err: err}:
		case <-ra.stop:
			return
		}
		if err != nil {
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
