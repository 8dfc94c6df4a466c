package erofs

import (
	"errors"
	"io"
)

// outBuf buffers what a blockWriter writes and hands each full buffer to a
// goroutine of its own, which writes it with WriteAt while the next one
// fills. The goroutine that lays the image out (and, with one worker,
// compresses it) then does not wait for the copy into the page cache: on
// the Linux tree that was 805 writes of 1 MiB and 0.23 s of its time.
//
// Bytes reach w in order and exactly once; Flush waits until all have.
type outBuf struct {
	w   io.WriterAt
	off int64  // where buf[0] goes
	buf []byte // filling

	todo     chan outWrite // to the writer goroutine
	done     chan outWrite // back from it, with the outcome
	spare    [][]byte      // empty buffers
	made     int           // buffers allocated, at most outBufCount
	inflight int           // writes sent and not yet back
	unwrit   int64         // bytes sent and not yet back
	err      error         // the first failed write: sticky
}

type outWrite struct {
	p   []byte
	off int64
	err error
}

// Two buffers: one filling while the other is written. Their size is the
// write size.
const (
	outBufCount = 2
	outBufSize  = 512 << 10
)

func newOutBuf(w io.WriterAt, off int64) *outBuf {
	return &outBuf{w: w, off: off, buf: make([]byte, 0, outBufSize), made: 1}
}

// Write buffers p.
func (o *outBuf) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if len(o.buf) == cap(o.buf) {
			if err := o.ship(); err != nil {
				return n, err
			}
		}
		k := copy(o.buf[len(o.buf):cap(o.buf)], p)
		o.buf = o.buf[:len(o.buf)+k]
		p = p[k:]
		n += k
	}
	return n, nil
}

// ReadFrom reads r to its end straight into the buffers (io.CopyN uses it).
func (o *outBuf) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		if len(o.buf) == cap(o.buf) {
			if err := o.ship(); err != nil {
				return total, err
			}
		}
		n, err := r.Read(o.buf[len(o.buf):cap(o.buf)])
		o.buf = o.buf[:len(o.buf)+n]
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// ship sends the filling buffer to the writer goroutine and takes an empty
// one: a spare, a new one, or the next to come back.
func (o *outBuf) ship() error {
	if o.err != nil {
		return o.err
	}
	if len(o.buf) == 0 {
		return nil
	}
	if o.todo == nil {
		o.todo = make(chan outWrite, outBufCount)
		o.done = make(chan outWrite, outBufCount)
		go func(w io.WriterAt, todo <-chan outWrite, done chan<- outWrite) {
			for wr := range todo {
				_, wr.err = w.WriteAt(wr.p, wr.off)
				done <- wr
			}
		}(o.w, o.todo, o.done)
	}
	o.todo <- outWrite{p: o.buf, off: o.off}
	o.inflight++
	o.unwrit += int64(len(o.buf))
	o.off += int64(len(o.buf))
	switch {
	case len(o.spare) > 0:
		o.buf = o.spare[len(o.spare)-1]
		o.spare = o.spare[:len(o.spare)-1]
	case o.made < outBufCount:
		o.buf = make([]byte, 0, outBufSize)
		o.made++
	default:
		o.buf = o.back()
	}
	o.buf = o.buf[:0]
	return o.err
}

// back waits for the oldest write and returns its buffer.
func (o *outBuf) back() []byte {
	wr := <-o.done
	o.inflight--
	o.unwrit -= int64(len(wr.p))
	if wr.err != nil && o.err == nil {
		o.err = wr.err
	}
	return wr.p
}

// Flush writes what is buffered and waits until every byte is written.
func (o *outBuf) Flush() error {
	if err := o.ship(); err != nil {
		return err
	}
	return o.settle()
}

// settle waits until no write is in flight, keeping the filling buffer.
func (o *outBuf) settle() error {
	for o.inflight > 0 {
		o.spare = append(o.spare, o.back())
	}
	return o.err
}

// Buffered is how many bytes are not written yet.
func (o *outBuf) Buffered() int { return len(o.buf) + int(o.unwrit) }

// Reset moves the output to off; what is buffered must be flushed first.
func (o *outBuf) Reset(off int64) error {
	if o.Buffered() > 0 {
		return errors.New("internal: output moved with unwritten bytes")
	}
	o.off = off
	return nil
}

// Close ends the writer goroutine, discarding what is not written.
func (o *outBuf) Close() {
	if o.todo != nil {
		close(o.todo)
		for o.inflight > 0 {
			o.back()
		}
		o.todo = nil
	}
}
