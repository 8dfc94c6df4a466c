package convert

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// tarReader reads a tar stream as archive/tar's Reader does, entry by entry,
// with a header parser of its own for the common entries: USTAR, PAX and GNU
// headers with PAX records ('x') and GNU long names ('L', 'K'). Every other
// entry (sparse files, PAX global headers, STAR headers, base-256 numbers,
// GNU headers with times) is handed to archive/tar with its header blocks,
// so that what this reader returns is what archive/tar returns: the same
// headers and data, and an error or the end at the same entry (FuzzTarReader
// compares them; the error itself may differ, e.g. for a PAX header over
// archive/tar's size limit, cut short). It leaves out the deprecated
// Header.Xattrs: its SCHILY.xattr records are in PAXRecords, where convert
// reads them. It is stricter in one place: a stream that ends after a PAX
// header or GNU long name, before their entry, is cut short
// (errEndAfterMeta), where archive/tar sees the end of the archive.
//
// Why: archive/tar decodes every USTAR header as UTF-8 to guess its format
// (bytes.IndexFunc over 512 bytes), which this project never asks for, and
// all of the parsing is on the goroutine that lays the image out. This
// reader does less on that goroutine (docs/performance.md, the build
// pipeline, has what it saves).
//
// Like archive/tar it reads no further than the header blocks before it
// returns an entry, so the stream's offset is then where the data starts
// (tarFile, tar indexes), and it skips unread data with Seek where the stream
// can seek.
type tarReader struct {
	r      io.Reader
	blk    [tarBlock]byte
	remain int64 // data of the current entry not read yet
	pad    int64 // and the padding after it
	err    error // sticky, as archive/tar's
	// start is where the headers of the entry being read begin, if r
	// keeps count (off, r as an offsetReader): errors name it.
	off   offsetReader
	start int64

	// meta holds the raw blocks (header, data, padding) of the latest PAX
	// header, GNU long name and GNU long link name of the entry being
	// read, for a fallback: archive/tar keeps only the latest of each too,
	// so that a stream of them takes no more than 3 MiB.
	meta [3][]byte
	// fb reads the current entry when it is one this reader leaves to
	// archive/tar; fbRead counts what it has read from r.
	fb     *tar.Reader
	fbRead *countingReader
}

func newTarReader(r io.Reader) *tarReader {
	tr := &tarReader{r: r}
	tr.off, _ = r.(offsetReader)
	return tr
}

// errFallback says that the entry is for archive/tar.
var errFallback = errors.New("tar entry for archive/tar")

// errEndAfterMeta: the stream ends (or its end-of-archive marker comes)
// after a PAX header or GNU long name, before the entry it describes.
// archive/tar (and GNU tar 1.34) take that for the end of the archive;
// Python's tarfile does not, nor does this reader: no writer ends an
// archive there, the stream was cut (TestTarReaderEndAfterMeta).
var errEndAfterMeta = fmt.Errorf("%w: the archive ends after a PAX header or GNU long name, before its entry", io.ErrUnexpectedEOF)

// maxSpecialFile bounds PAX records and GNU long names, as in archive/tar.
const maxSpecialFile = 1 << 20

// Next advances to the next entry, as tar.Reader.Next.
func (tr *tarReader) Next() (*tar.Header, error) {
	if tr.err != nil {
		return nil, tr.err
	}
	hdr, err := tr.next()
	tr.err = err
	return hdr, err
}

func (tr *tarReader) next() (*tar.Header, error) {
	if err := tr.skip(); err != nil {
		return nil, err
	}
	if tr.off != nil {
		tr.start = tr.off.offset()
	}
	for i, m := range tr.meta {
		if cap(m) > 64<<10 {
			m = nil // not kept after a big one
		}
		tr.meta[i] = m[:0]
	}
	var pax map[string]string
	var longName, longLink string
	for meta := false; ; meta = true {
		hdr, err := tr.readHeader()
		if err == errFallback {
			return tr.fallback(tr.blk[:])
		}
		if err == io.EOF && meta {
			return nil, errEndAfterMeta
		}
		if err != nil {
			return nil, err
		}
		nb, err := dataSize(hdr)
		if err != nil {
			return nil, err
		}
		switch hdr.Typeflag {
		case tar.TypeXHeader:
			buf, err := tr.special(metaPAX, nb)
			if err != nil {
				return nil, err
			}
			pax, err = parsePAXRecords(buf)
			if err == errFallback {
				return tr.fallback(nil)
			}
			if err != nil {
				return nil, err
			}
			continue
		case tar.TypeGNULongName, tar.TypeGNULongLink:
			slot := metaLongName
			if hdr.Typeflag == tar.TypeGNULongLink {
				slot = metaLongLink
			}
			buf, err := tr.special(slot, nb)
			if err != nil {
				return nil, err
			}
			if slot == metaLongName {
				longName = cString(buf)
			} else {
				longLink = cString(buf)
			}
			continue
		case tar.TypeXGlobalHeader, tar.TypeGNUSparse:
			return tr.fallback(tr.blk[:])
		}
		if err := mergePAXRecords(hdr, pax); err != nil {
			return nil, err
		}
		if longName != "" {
			hdr.Name = longName
		}
		if longLink != "" {
			hdr.Linkname = longLink
		}
		if hdr.Typeflag == typeRegA {
			hdr.Typeflag = tar.TypeReg
			if strings.HasSuffix(hdr.Name, "/") {
				hdr.Typeflag = tar.TypeDir
			}
		}
		// The records and the type may have changed the data's size.
		if tr.remain, err = dataSize(hdr); err != nil {
			return nil, err
		}
		tr.pad = -tr.remain & (tarBlock - 1)
		return hdr, nil
	}
}

// skip passes the rest of the current entry and its padding.
func (tr *tarReader) skip() error {
	if tr.fb != nil {
		// archive/tar has read what it needed of r, the data up to
		// where its reader was left: the rest, then the padding.
		fb, n := tr.fb, tr.fbRead
		tr.fb, tr.fbRead = nil, nil
		if _, err := io.Copy(io.Discard, fb); err != nil {
			return err
		}
		tr.remain, tr.pad = 0, -n.n&(tarBlock-1)
	}
	if tr.remain > 0 {
		if err := skipData(tr.r, tr.remain); err != nil {
			return err
		}
		tr.remain = 0
	}
	if tr.pad > 0 {
		_, err := tryReadFull(tr.r, tr.blk[:tr.pad])
		tr.pad = 0
		return err
	}
	return nil
}

// readHeader reads one header block and parses what this reader parses
// itself; errFallback if it does not.
func (tr *tarReader) readHeader() (*tar.Header, error) {
	b := tr.blk[:]
	if _, err := io.ReadFull(tr.r, b); err != nil {
		return nil, err
	}
	if tr.blk == [tarBlock]byte{} {
		// The end: two zero blocks, or one and the end of the stream.
		if _, err := io.ReadFull(tr.r, b); err != nil {
			return nil, err
		}
		if tr.blk == [tarBlock]byte{} {
			return nil, io.EOF
		}
		return nil, tar.ErrHeader
	}

	var p octalParser
	sum := p.octal(b[148:156])
	unsigned, signed := checksums(b)
	if p.err || sum != unsigned && sum != signed {
		return nil, tar.ErrHeader
	}
	magic, version := string(b[257:263]), string(b[263:265])
	ustar := magic == "ustar\x00"
	gnu := magic == "ustar " && version == " \x00"
	switch {
	case ustar && string(b[508:512]) == "tar\x00": // STAR
		return nil, errFallback
	case gnu && (b[345] != 0 || b[357] != 0): // GNU access and change times
		return nil, errFallback
	}
	numeric := [...][2]int{{100, 108}, {108, 116}, {116, 124}, {124, 136}, {136, 148}, {329, 337}, {337, 345}}
	for _, f := range numeric {
		if b[f[0]]&0x80 != 0 { // base-256
			return nil, errFallback
		}
	}
	hdr := &tar.Header{
		Typeflag: b[156],
		Name:     cString(b[0:100]),
		Linkname: cString(b[157:257]),
		Size:     p.octal(b[124:136]),
		Mode:     p.octal(b[100:108]),
		Uid:      int(p.octal(b[108:116])),
		Gid:      int(p.octal(b[116:124])),
		ModTime:  time.Unix(p.octal(b[136:148]), 0),
	}
	if ustar || gnu {
		hdr.Uname = cString(b[265:297])
		hdr.Gname = cString(b[297:329])
		hdr.Devmajor = p.octal(b[329:337])
		hdr.Devminor = p.octal(b[337:345])
	}
	if ustar {
		if prefix := cString(b[345:500]); prefix != "" {
			hdr.Name = prefix + "/" + hdr.Name
		}
	}
	if p.err {
		return nil, tar.ErrHeader
	}
	return hdr, nil
}

// The slots of tarReader.meta.
const (
	metaPAX = iota
	metaLongName
	metaLongLink
)

// special reads the n bytes of a PAX header or GNU long name, whose header
// block was just read, and their padding into meta[slot].
func (tr *tarReader) special(slot int, n int64) ([]byte, error) {
	if n > maxSpecialFile {
		return nil, tar.ErrFieldTooLong
	}
	size := tarBlock + int(n+tarBlock-1)&^(tarBlock-1)
	m := tr.meta[slot]
	if cap(m) < size {
		m = make([]byte, size)
	}
	m = m[:size]
	tr.meta[slot] = m
	copy(m, tr.blk[:])
	buf := m[tarBlock : tarBlock+int(n)]
	if _, err := io.ReadFull(tr.r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if _, err := tryReadFull(tr.r, m[tarBlock+int(n):]); err != nil {
		if err == io.EOF {
			err = errEndAfterMeta // in its padding
		}
		return nil, err
	}
	return buf, nil
}

// fallback hands the entry to archive/tar: the blocks of the entry read so
// far that count (meta, and last, the header just read, if any), then the
// rest of r.
func (tr *tarReader) fallback(last []byte) (*tar.Header, error) {
	var replay []io.Reader
	for _, m := range tr.meta {
		if len(m) > 0 {
			replay = append(replay, bytes.NewReader(m))
		}
	}
	if last != nil {
		replay = append(replay, bytes.NewReader(last))
	}
	tr.fbRead = &countingReader{r: tr.r}
	tr.fb = tar.NewReader(io.MultiReader(append(replay, tr.fbRead)...))
	hdr, err := tr.fb.Next()
	if err == io.EOF && last == nil {
		// Only meta blocks were replayed (the PAX records of a sparse
		// file): archive/tar found no entry after them.
		err = errEndAfterMeta
	}
	return hdr, err
}

// Read reads the current entry's data, as tar.Reader.Read.
func (tr *tarReader) Read(b []byte) (int, error) {
	if tr.err != nil {
		return 0, tr.err
	}
	if tr.fb != nil {
		n, err := tr.fb.Read(b)
		if err != nil && err != io.EOF {
			tr.err = err
		}
		return n, err
	}
	if int64(len(b)) > tr.remain {
		b = b[:tr.remain]
	}
	var n int
	var err error
	if len(b) > 0 {
		n, err = tr.r.Read(b)
		tr.remain -= int64(n)
	}
	switch {
	case err == io.EOF && tr.remain > 0:
		err = io.ErrUnexpectedEOF
	case err == nil && tr.remain == 0:
		err = io.EOF
	}
	if err != nil && err != io.EOF {
		tr.err = err
	}
	return n, err
}

// typeRegA is the type flag of a regular file in pre-POSIX archives, a
// NUL byte: archive/tar's TypeRegA, deprecated for writers, which readers
// still meet.
const typeRegA = '\x00'

// mergePAXRecords applies the records of a PAX header to hdr, as
// archive/tar does: an empty value keeps the header's own.
func mergePAXRecords(hdr *tar.Header, pax map[string]string) error {
	if pax == nil {
		return nil
	}
	for k, v := range pax {
		if v == "" {
			continue
		}
		var err error
		var n int64
		switch k {
		case "path":
			hdr.Name = v
		case "linkpath":
			hdr.Linkname = v
		case "uname":
			hdr.Uname = v
		case "gname":
			hdr.Gname = v
		case "uid":
			n, err = strconv.ParseInt(v, 10, 64)
			hdr.Uid = int(n)
		case "gid":
			n, err = strconv.ParseInt(v, 10, 64)
			hdr.Gid = int(n)
		case "atime":
			hdr.AccessTime, err = parsePAXTime(v)
		case "mtime":
			hdr.ModTime, err = parsePAXTime(v)
		case "ctime":
			hdr.ChangeTime, err = parsePAXTime(v)
		case "size":
			hdr.Size, err = strconv.ParseInt(v, 10, 64)
		}
		if err != nil {
			return tar.ErrHeader
		}
	}
	hdr.PAXRecords = pax
	return nil
}

// parsePAXRecords parses the records "<length> <key>=<value>\n" of a PAX
// header; errFallback for those of a sparse file.
func parsePAXRecords(buf []byte) (map[string]string, error) {
	s := string(buf)
	pax := map[string]string{}
	for len(s) > 0 {
		lenStr, rest, ok := strings.Cut(s, " ")
		if !ok {
			return nil, tar.ErrHeader
		}
		n, err := strconv.ParseInt(lenStr, 10, 0)
		if err != nil || n < 5 || n > int64(len(s)) {
			return nil, tar.ErrHeader
		}
		n -= int64(len(lenStr) + 1) // the record's length after the space
		if n <= 0 || rest[n-1] != '\n' {
			return nil, tar.ErrHeader
		}
		k, v, ok := strings.Cut(rest[:n-1], "=")
		if !ok || !validPAXRecord(k, v) {
			return nil, tar.ErrHeader
		}
		if strings.HasPrefix(k, "GNU.sparse.") {
			return nil, errFallback // a sparse file
		}
		s = rest[n:]
		pax[k] = v
	}
	return pax, nil
}

// validPAXRecord: a key with no '=' or NUL, and no NUL in the values that
// name things.
func validPAXRecord(k, v string) bool {
	if k == "" || strings.Contains(k, "=") {
		return false
	}
	switch k {
	case "path", "linkpath", "uname", "gname":
		return !strings.Contains(v, "\x00")
	}
	return !strings.Contains(k, "\x00")
}

// parsePAXTime parses "seconds[.fraction]"; digits past nanoseconds are
// dropped, and a negative time's fraction counts down.
func parsePAXTime(s string) (time.Time, error) {
	secStr, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(secStr, 10, 64)
	if err != nil {
		return time.Time{}, tar.ErrHeader
	}
	var nsec int64
	for i := 0; i < len(frac); i++ {
		c := frac[i]
		if c < '0' || c > '9' {
			return time.Time{}, tar.ErrHeader
		}
		if i < 9 {
			nsec = nsec*10 + int64(c-'0')
		}
	}
	for i := len(frac); i < 9; i++ {
		nsec *= 10
	}
	if secStr != "" && secStr[0] == '-' {
		nsec = -nsec
	}
	return time.Unix(sec, nsec), nil
}

// octalParser parses the octal fields of a header, noting any error.
type octalParser struct{ err bool }

// octal parses a field of octal digits between spaces and NULs, up to its
// first NUL after them.
func (p *octalParser) octal(b []byte) int64 {
	i, j := 0, len(b)
	for i < j && (b[i] == ' ' || b[i] == 0) {
		i++
	}
	for j > i && (b[j-1] == ' ' || b[j-1] == 0) {
		j--
	}
	b = b[i:j]
	if k := bytes.IndexByte(b, 0); k >= 0 {
		b = b[:k]
	}
	if len(b) == 0 {
		return 0
	}
	var x uint64
	for _, c := range b {
		if c < '0' || c > '7' || x>>61 != 0 {
			p.err = true
			return 0
		}
		x = x<<3 | uint64(c-'0')
	}
	return int64(x)
}

// checksums sums the block's bytes, unsigned and signed, with the checksum
// field taken as spaces.
func checksums(b []byte) (unsigned, signed int64) {
	for i, c := range b {
		if i >= 148 && i < 156 {
			c = ' '
		}
		unsigned += int64(c)
		signed += int64(int8(c))
	}
	return unsigned, signed
}

// cString is b up to its first NUL.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// dataSize is the length of an entry's data in the stream: none for the
// types that have none, whatever their size field says.
func dataSize(hdr *tar.Header) (int64, error) {
	switch hdr.Typeflag {
	case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
		return 0, nil
	}
	if hdr.Size < 0 {
		return 0, tar.ErrHeader
	}
	return hdr.Size, nil
}

// skipData skips n bytes of r: by Seek where it can, all but the last byte,
// which is read to find a stream that ends short.
func skipData(r io.Reader, n int64) error {
	var seeked int64
	if s, ok := r.(io.Seeker); ok && n > 1 {
		if p1, err := s.Seek(0, io.SeekCurrent); err == nil && p1 >= 0 {
			p2, err := s.Seek(n-1, io.SeekCurrent)
			if err != nil || p2 < 0 {
				return err
			}
			seeked = p2 - p1
		}
	}
	copied, err := io.CopyN(io.Discard, r, n-seeked)
	if err == io.EOF && seeked+copied < n {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// tryReadFull fills b; io.EOF if the stream ends first, after any bytes.
func tryReadFull(r io.Reader, b []byte) (int, error) {
	n := 0
	var err error
	for n < len(b) && err == nil {
		var k int
		k, err = r.Read(b[n:])
		n += k
	}
	if n == len(b) && err == io.EOF {
		err = nil
	}
	return n, err
}
