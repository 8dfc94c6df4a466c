package deflate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
)

// inflater is a reusable raw-DEFLATE reader over an in-memory stream.
type inflater struct {
	src bytes.Reader
	r   io.ReadCloser
	one [1]byte
}

var inflaters = sync.Pool{New: func() any {
	f := new(inflater)
	f.r = flate.NewReader(&f.src)
	return f
}}

// ErrShortStream and ErrLongStream say that a stream does not decode to
// exactly the size the caller expects.
var (
	ErrShortStream = errors.New("deflate: stream ends before the output is full")
	ErrLongStream  = errors.New("deflate: stream goes on after the output is full")
)

// Decompress inflates the raw DEFLATE stream src into exactly len(dst)
// bytes, as the kernel's full decoding of a pcluster does: the final block
// must end when dst is full. Bytes after the end of the stream are ignored.
// It never panics on malformed input; errors say what went wrong.
func Decompress(dst, src []byte) error {
	f := inflaters.Get().(*inflater)
	defer inflaters.Put(f)
	f.src.Reset(src)
	if err := f.r.(flate.Resetter).Reset(&f.src, nil); err != nil {
		return fmt.Errorf("deflate: %w", err)
	}
	n, err := io.ReadFull(f.r, dst)
	switch {
	case err == io.ErrUnexpectedEOF || err == io.EOF:
		return fmt.Errorf("%w (%d of %d bytes)", ErrShortStream, n, len(dst))
	case err != nil:
		return fmt.Errorf("deflate: after %d of %d bytes: %w", n, len(dst), err)
	}
	m, err := f.r.Read(f.one[:])
	switch {
	case m > 0:
		return fmt.Errorf("%w (%d bytes)", ErrLongStream, len(dst))
	case err == io.EOF:
		return nil
	case err == nil || err == io.ErrUnexpectedEOF:
		return fmt.Errorf("%w (%d bytes, no final block)", ErrLongStream, len(dst))
	}
	return fmt.Errorf("deflate: after %d bytes: %w", len(dst), err)
}
