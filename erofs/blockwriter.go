package erofs

import (
	"errors"
	"io"
)

// blockWriter writes whole blocks in order from a starting block of an
// io.WriterAt, through buffers written on a goroutine of their own
// (outBuf). It can go back over blocks that turned out to hold duplicate
// data (rewind); finish then cuts what is left past the end. The image's
// data area and a blob are each one.
type blockWriter struct {
	w      io.WriterAt
	out    *outBuf
	bs     int
	outBlk uint64 // next block written
	maxBlk uint64 // the end before a rewind
}

func newBlockWriter(w io.WriterAt, bs int, blk uint64) blockWriter {
	return blockWriter{w: w, bs: bs, outBlk: blk, out: newOutBuf(w, int64(blk)*int64(bs))}
}

// write writes p where the output is; the caller keeps it block-aligned.
func (w *blockWriter) write(p []byte) error {
	_, err := w.out.Write(p)
	return err
}

// writeMaybeRef writes p as write does, or, with ref, without copying it:
// p must then not change until the output is written up to out.LastRef.
func (w *blockWriter) writeMaybeRef(p []byte, ref bool) error {
	if ref {
		return w.out.WriteRef(p)
	}
	return w.write(p)
}

// writePadded writes p and zero-pads it to the next block boundary.
func (w *blockWriter) writePadded(p []byte) error {
	if err := w.write(p); err != nil {
		return err
	}
	return w.padBlock(uint64(len(p)))
}

// padBlock pads a region of n bytes that started at a block boundary to the
// next block boundary and advances the block counter past it.
func (w *blockWriter) padBlock(n uint64) error {
	bs := uint64(w.bs)
	if r := n % bs; r != 0 {
		if err := w.writeZeros(bs - r); err != nil {
			return err
		}
	}
	w.outBlk += (n + bs - 1) / bs
	return nil
}

func (w *blockWriter) writeZeros(n uint64) error {
	for n > 0 {
		k := min(n, uint64(len(zeroBlock)))
		// zeroBlock never changes: no need to copy it.
		if err := w.out.WriteRef(zeroBlock[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

var zeroBlock = make([]byte, 65536)

// skipBlocks moves the output past n blocks written around the buffer,
// with WriteAt; the buffer must be flushed.
func (w *blockWriter) skipBlocks(n uint64) error {
	w.outBlk += n
	return w.out.Reset(int64(w.outBlk) * int64(w.bs))
}

// rewind moves the output back to block blk, over data that turned out to
// be a duplicate.
func (w *blockWriter) rewind(blk uint64) error {
	if blk == w.outBlk {
		return nil
	}
	if err := w.out.Flush(); err != nil {
		return err
	}
	w.maxBlk = max(w.maxBlk, w.outBlk)
	w.outBlk = blk
	return w.out.Reset(int64(blk) * int64(w.bs))
}

// finish flushes the output and cuts what a rewind left past its end.
func (w *blockWriter) finish() error {
	err := w.out.Flush()
	w.out.Close()
	if err != nil {
		return err
	}
	if w.maxBlk <= w.outBlk {
		return nil
	}
	t, ok := w.w.(interface{ Truncate(int64) error })
	if !ok {
		return errors.New("cannot truncate the output after a rewind")
	}
	return t.Truncate(int64(w.outBlk) * int64(w.bs))
}
