package convert

import (
	"errors"
	"io"
	"os"

	"github.com/ocierofs/ocierofs/erofs"
)

// tarFile reads a plain tar file on disk with pread at an offset of its
// own. archive/tar skips the data it is not asked for by seeking, which
// costs tarFile no system call, so the data of the big files can go to the
// Builder as erofs.DataAt and be read by the workers that compress it: the
// goroutine that parses the tar and writes the image copies none of it.
// Small files are read through the buffer as before, which already holds
// them: a pread per file would cost more than the copy it saves.
type tarFile struct {
	f      *os.File
	size   int64
	n      int64  // the offset of the next byte Read returns
	buf    []byte // the file's bytes from bufOff
	bufOff int64
}

// laterData is the size from which a file's data goes to the Builder as
// erofs.DataAt: a file at least as big as the read buffer is mostly not in
// it. (A variable for FuzzTarFile.)
var laterData int64 = 64 << 10

// openTarFile returns r as a tarFile, positioned where its reading goes
// on, if it is a regular file and nothing needs every byte to flow through
// a reader (noHash: there is no diffID to compute).
func openTarFile(r io.Reader, noHash bool) (*tarFile, bool) {
	f, ok := r.(*os.File)
	if !ok || !noHash {
		return nil, false
	}
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, false
	}
	pos, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, false
	}
	return &tarFile{f: f, size: fi.Size(), n: pos, buf: make([]byte, 0, 64<<10)}, true
}

func (t *tarFile) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if t.n < t.bufOff || t.n >= t.bufOff+int64(len(t.buf)) {
		if len(p) >= cap(t.buf) {
			n, err := t.f.ReadAt(p, t.n)
			t.n += int64(n)
			if n > 0 {
				err = nil
			}
			return n, err
		}
		n, err := t.f.ReadAt(t.buf[:cap(t.buf)], t.n)
		t.buf, t.bufOff = t.buf[:n], t.n
		if n == 0 {
			if err == nil {
				err = io.EOF
			}
			return 0, err
		}
	}
	n := copy(p, t.buf[t.n-t.bufOff:])
	t.n += int64(n)
	return n, nil
}

// Seek moves the offset of the next Read; reading past the end is EOF.
func (t *tarFile) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		off += t.n
	case io.SeekEnd:
		off += t.size
	}
	if off < 0 {
		return t.n, errors.New("tar: seek before the start of the file")
	}
	t.n = off
	return off, nil
}

func (t *tarFile) offset() int64 { return t.n }

// data is what the Builder gets as the data of a file of size bytes whose
// header was just read: the tar reader's own for small files, the bytes
// in the file for the others.
func (t *tarFile) data(tr io.Reader, size int64) io.Reader {
	if size < laterData || t.n+size > t.size {
		// A truncated tar fails in the tar reader, as it does when read.
		return tr
	}
	return erofs.DataAt(t.f, t.n, size)
}

// plain reports that the file does not start with a compressed stream's
// magic number.
func (t *tarFile) plain() bool {
	head := make([]byte, 6)
	n, _ := t.f.ReadAt(head, t.n)
	return !compressedMagic(head[:n])
}
