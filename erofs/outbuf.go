package erofs

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// outBuf gathers what a blockWriter writes into batches and hands each
// full batch to a goroutine of its own, which writes it while the next one
// fills. The goroutine that lays the image out (and, with one worker,
// compresses it) then does not wait for the copy into the page cache, one
// write system call per batch.
//
// A batch holds bytes of two kinds, in order: those given to Write, copied
// into the batch's buffer, and those given to WriteRef, which stay where
// they are until written. A batch goes to a file with one pwritev, so the
// compressed data in the pipeline's ring is copied once, by the kernel,
// instead of into a buffer first: that copy read every byte another CPU
// had just written (see zpipe.release).
//
// Bytes reach w in order and exactly once; Flush waits until all have.
type outBuf struct {
	w    io.WriterAt
	fd   int      // w's, if it is a file: a batch is one pwritev; else -1
	name string   // w's, for errors
	off  int64    // where the filling batch goes
	b    outBatch // filling

	todo     chan outBatch // to the writer goroutine
	done     chan outBatch // back from it, with the outcome
	spare    []outBatch    // empty batches
	made     int           // batches allocated, at most outBufCount
	inflight int           // batches sent and not yet back
	unwrit   int64         // bytes sent and not yet back
	err      error         // the first failed write: sticky

	// accepted counts the bytes given to Write, WriteRef and ReadFrom;
	// written, those of them that are written; lastRef is accepted just
	// after the latest WriteRef. They only grow, through Reset too: the
	// bytes of every WriteRef so far may change once written reaches
	// lastRef.
	accepted, written, lastRef int64
}

// outBatch is one write: iov in order, from off. Pieces of buf are the
// bytes copied in; the others were given by reference.
type outBatch struct {
	buf   []byte
	iov   [][]byte
	n     int  // bytes in iov
	inBuf bool // the last piece of iov ends buf: copied bytes extend it
	off   int64
	err   error
}

// Two batches: one filling while the other is written. outBufSize is the
// size of a write and of a batch's buffer; outBufIov bounds its pieces
// (the kernel takes at most 1024 in one call).
const (
	outBufCount = 2
	outBufSize  = 512 << 10
	outBufIov   = 1024
)

func newOutBuf(w io.WriterAt, off int64) *outBuf {
	o := &outBuf{w: w, fd: -1, off: off, made: 1, b: newOutBatch()}
	if f, ok := w.(*os.File); ok && havePwritev {
		// The descriptor stays valid while f is open, which it is
		// until the Builder is done with it.
		if rc, err := f.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) { o.fd, o.name = int(fd), f.Name() })
		}
	}
	return o
}

func newOutBatch() outBatch {
	return outBatch{buf: make([]byte, 0, outBufSize), iov: make([][]byte, 0, 64)}
}

// Write copies p into the filling batch.
func (o *outBuf) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if err := o.room(); err != nil {
			return n, err
		}
		b := &o.b
		k := copy(b.buf[len(b.buf):cap(b.buf)], p)
		o.copied(k)
		p = p[k:]
		n += k
	}
	return n, nil
}

// WriteRef adds p to the filling batch without copying it: p must not
// change until Written reaches LastRef.
func (o *outBuf) WriteRef(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if err := o.room(); err != nil {
		return err
	}
	o.b.iov = append(o.b.iov, p)
	o.b.n += len(p)
	o.b.inBuf = false
	o.accepted += int64(len(p))
	o.lastRef = o.accepted
	return nil
}

// room ships the filling batch if it has no room for another piece.
func (o *outBuf) room() error {
	b := &o.b
	if b.n >= outBufSize || len(b.buf) == cap(b.buf) || len(b.iov) >= outBufIov {
		return o.ship()
	}
	return o.err
}

// copied records k bytes just copied to the end of the batch's buffer.
func (o *outBuf) copied(k int) {
	if k == 0 {
		return
	}
	b := &o.b
	start := len(b.buf)
	b.buf = b.buf[:start+k]
	if last := len(b.iov) - 1; b.inBuf {
		b.iov[last] = b.buf[start-len(b.iov[last]) : start+k]
	} else {
		b.iov = append(b.iov, b.buf[start:start+k])
		b.inBuf = true
	}
	b.n += k
	o.accepted += int64(k)
}

// ReadFrom reads r to its end straight into the batches (io.CopyN uses it).
func (o *outBuf) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		if err := o.room(); err != nil {
			return total, err
		}
		b := &o.b
		n, err := r.Read(b.buf[len(b.buf):cap(b.buf)])
		if n > 0 {
			o.copied(n)
		}
		total += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// LastRef is how many bytes the outBuf had been given just after the
// latest WriteRef; Written, how many of them are written.
func (o *outBuf) LastRef() int64 { return o.lastRef }
func (o *outBuf) Written() int64 { return o.written }

// WaitWritten returns once Written reaches n (at most LastRef), shipping
// the filling batch if it holds bytes below n.
func (o *outBuf) WaitWritten(n int64) error {
	if o.written+o.unwrit < n {
		if err := o.ship(); err != nil {
			return err
		}
	}
	for o.written < n && o.inflight > 0 {
		o.spare = append(o.spare, o.back())
	}
	return o.err
}

// Collect takes back the batches written so far, without waiting.
func (o *outBuf) Collect() {
	for o.inflight > 0 {
		select {
		case wr := <-o.done:
			o.spare = append(o.spare, o.returned(wr))
		default:
			return
		}
	}
}

// ship sends the filling batch to the writer goroutine and takes an empty
// one: a spare, a new one, or the next to come back.
func (o *outBuf) ship() error {
	if o.err != nil {
		return o.err
	}
	if o.b.n == 0 {
		return nil
	}
	if o.todo == nil {
		o.todo = make(chan outBatch, outBufCount)
		o.done = make(chan outBatch, outBufCount)
		go func(w io.WriterAt, fd int, name string, todo <-chan outBatch, done chan<- outBatch) {
			var vec iovecs
			for wr := range todo {
				wr.err = writeBatch(w, fd, name, wr.iov, wr.off, &vec)
				done <- wr
			}
		}(o.w, o.fd, o.name, o.todo, o.done)
	}
	o.b.off = o.off
	o.todo <- o.b
	o.inflight++
	o.unwrit += int64(o.b.n)
	o.off += int64(o.b.n)
	switch {
	case len(o.spare) > 0:
		o.b = o.spare[len(o.spare)-1]
		o.spare = o.spare[:len(o.spare)-1]
	case o.made < outBufCount:
		o.b = newOutBatch()
		o.made++
	default:
		o.b = o.back()
	}
	return o.err
}

// back waits for the oldest write and returns its batch, emptied.
func (o *outBuf) back() outBatch {
	return o.returned(<-o.done)
}

func (o *outBuf) returned(wr outBatch) outBatch {
	o.inflight--
	o.unwrit -= int64(wr.n)
	o.written += int64(wr.n)
	if wr.err != nil && o.err == nil {
		o.err = wr.err
	}
	clear(wr.iov) // the references, for the GC
	return outBatch{buf: wr.buf[:0], iov: wr.iov[:0]}
}

// writeBatch writes iov from off: to a file (fd) with pwritev, as many
// times as it takes; to any other WriterAt piece by piece.
func writeBatch(w io.WriterAt, fd int, name string, iov [][]byte, off int64, vec *iovecs) error {
	if fd < 0 {
		for _, p := range iov {
			if _, err := w.WriteAt(p, off); err != nil {
				return err
			}
			off += int64(len(p))
		}
		return nil
	}
	for len(iov) > 0 {
		n, err := pwritev(fd, iov[:min(len(iov), outBufIov)], off, vec)
		if err == syscall.EINTR {
			continue
		}
		if err == nil && n == 0 {
			err = io.ErrShortWrite
		}
		if err != nil {
			return &os.PathError{Op: "pwritev", Path: name, Err: err}
		}
		off += int64(n)
		for n > 0 {
			if n < len(iov[0]) {
				iov[0] = iov[0][n:]
				break
			}
			n -= len(iov[0])
			iov = iov[1:]
		}
	}
	return nil
}

// Flush writes what is buffered and waits until every byte is written.
func (o *outBuf) Flush() error {
	if err := o.ship(); err != nil {
		return err
	}
	return o.settle()
}

// settle waits until no write is in flight, keeping the filling batch.
func (o *outBuf) settle() error {
	for o.inflight > 0 {
		o.spare = append(o.spare, o.back())
	}
	return o.err
}

// Buffered is how many bytes are not written yet.
func (o *outBuf) Buffered() int { return o.b.n + int(o.unwrit) }

// Reset moves the output to off; what is buffered must be flushed first.
func (o *outBuf) Reset(off int64) error {
	if o.Buffered() > 0 {
		return errors.New("internal: output moved with unwritten bytes")
	}
	o.off = off
	return nil
}

// Close ends the writer goroutine, discarding what is not written. Once it
// returns, no reference given to WriteRef is used.
func (o *outBuf) Close() {
	if o.todo != nil {
		close(o.todo)
		for o.inflight > 0 {
			o.back()
		}
		o.todo = nil
	}
	clear(o.b.iov)
	o.b = outBatch{buf: o.b.buf[:0], iov: o.b.iov[:0]}
}
