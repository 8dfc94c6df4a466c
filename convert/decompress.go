package convert

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/ocierofs/ocierofs/oci"
)

// Compression of a layer stream, detected from its first bytes.
type Compression string

const (
	Uncompressed Compression = "none"
	Gzip         Compression = "gzip"
	Zstd         Compression = "zstd"
)

// compressedMagic reports that a stream starting with head is compressed,
// in a format Decompress reads or names.
func compressedMagic(head []byte) bool {
	kind := oci.Sniff(head)
	return kind != "" && kind != "tar"
}

// Decompress detects gzip or zstd by magic bytes (never by file name or
// media type, which lie) and returns the uncompressed stream.
func Decompress(r io.Reader) (io.ReadCloser, Compression, error) {
	src := &sourceReader{r: r}
	br := bufio.NewReaderSize(src, 64<<10)
	head, err := br.Peek(6)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, "", err
	}
	if !compressedMagic(head) {
		return io.NopCloser(br), Uncompressed, nil
	}
	kind := oci.Sniff(head)
	zr, err := oci.Decompressor(kind, br)
	if err != nil {
		return nil, Compression(kind), err
	}
	return &decoder{ReadCloser: zr, name: kind, src: src}, Compression(kind), nil
}

// decoder names its decompressor in the errors it returns, and reports a
// stream that stops before its end as an error of its own, not as the
// io.ErrUnexpectedEOF that readers of the tar inside take for the end of
// a last, short read: a gzip layer cut after a tar header must fail, not
// give an image of the entries before the cut.
// An error of the compressed stream itself (a blob that fails its digest,
// a broken download) is passed on as it is, not named after the codec.
type decoder struct {
	io.ReadCloser
	name string
	n    int64 // bytes decompressed so far
	src  *sourceReader
}

// sourceReader remembers the error of the stream it reads.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.err = err
	}
	return n, err
}

func (d *decoder) Read(p []byte) (int, error) {
	n, err := d.ReadCloser.Read(p)
	d.n += int64(n)
	switch {
	case err == nil || err == io.EOF:
		return n, err
	case d.src.err != nil && !errors.Is(d.src.err, io.ErrUnexpectedEOF) && errors.Is(err, d.src.err):
		return n, fmt.Errorf("%w (after %d bytes decompressed)", err, d.n)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return n, fmt.Errorf("%s: the stream ends early, after %d bytes decompressed", d.name, d.n)
	case strings.HasPrefix(err.Error(), d.name+":"):
		return n, fmt.Errorf("%w, after %d bytes decompressed", err, d.n)
	default:
		return n, fmt.Errorf("%s: %w, after %d bytes decompressed", d.name, err, d.n)
	}
}
