package convert

import (
	"archive/tar"
	"cmp"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/url"
	"runtime"
	"slices"
	"strings"

	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

// offsetReader is a tar stream that knows its offset, for errors and
// tar indexes.
type offsetReader interface {
	io.Reader
	offset() int64
}

// countingReader counts the bytes read through it, for error offsets.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) offset() int64 { return c.n }

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// tarLayer feeds one tar stream into a Builder.
type tarLayer struct {
	b   *erofs.Builder
	wt  *whiteout.Translator
	ops *dirOps // the layer's change set, for the layers above
	// model is the layer's change set (whiteout.Layer), which decides
	// what its entries do to one another and to the layers below.
	model    *whiteout.Layer
	warnings []string
	entries  int
	// flat, when set, merges this layer into an image of all layers, read
	// top-down; rank is the layer's place from the top (0).
	flat     *flattener
	rank     int
	progress func(read int64) // of a flattened image: bytes read of all layers
	// tarIndex, when set, leaves file data in the tar (extra device 1) and
	// indexes it from the image (mkfs --tar-index); pos is the tar offset.
	tarIndex bool
	pos      offsetReader
	// lowerRoot is Options.lowerRoot; rootOpaque is the header of the
	// layer's opaque marker on the root, if it has one.
	lowerRoot  func() ([]string, bool)
	rootOpaque *tar.Header
	// maxTar is Options.MaxTarSize: a file whose header alone puts the
	// tar past it fails there, before its data is read.
	maxTar int64
}

// addTar reads an uncompressed tar stream to its end, adding every entry.
// Every byte of the stream also goes to h, if not nil: the layer's diffID
// is its sha256. compressed says that r decompresses as it is read.
func (l *tarLayer) addTar(r io.Reader, h hash.Hash, compressed bool) error {
	tf, _ := r.(*tarFile)
	var src offsetReader = tf
	if tf == nil {
		s := r
		if compressed || h != nil && runtime.GOMAXPROCS(0) > 1 {
			// Decompressing and hashing overlap with building on a
			// goroutine of their own. For a plain tar with nothing to
			// overlap, reading straight into the Builder's buffers saves
			// a copy of the data.
			ra := newReadAhead(r, h)
			defer ra.Close()
			s = ra
		} else if h != nil {
			s = io.TeeReader(r, h)
		}
		src = &countingReader{r: s}
	}
	l.pos = src
	l.model = whiteout.NewLayer(l.wt.Mode())
	if l.ops != nil {
		l.ops.layer = l.model
	}
	if l.flat != nil {
		l.flat.layers = append(l.flat.layers, l.model)
	}
	tr := newTarReader(src)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				return fmt.Errorf("tar: truncated at offset %d", src.offset())
			}
			return fmt.Errorf("tar: the entry at offset %d: %w", tr.start, err)
		}
		// The header is the last 512-byte block read so far.
		off := src.offset() - 512
		if l.maxTar > 0 && hdr.Typeflag == tar.TypeReg && !isSparse(hdr) && hdr.Size > l.maxTar-src.offset() {
			return fmt.Errorf("tar entry %q at offset %d: %d bytes: %w", hdr.Name, off, hdr.Size, &TooLargeError{Max: l.maxTar})
		}
		var data io.Reader = tr
		if tf != nil && hdr.Typeflag == tar.TypeReg && !isSparse(hdr) {
			data = tf.data(tr, hdr.Size)
		}
		if err := l.addEntry(hdr, data); err != nil {
			// The data of an earlier entry, read and compressed after its
			// Add returned, can fail now: name that entry.
			var ee *erofs.EntryError
			if errors.As(err, &ee) {
				if p, perr := erofs.CleanPath(hdr.Name); perr == nil && p != ee.Path {
					return fmt.Errorf("tar entry %q: %w", ee.Path, ee.Err)
				}
			}
			return fmt.Errorf("tar entry %q at offset %d: %w", hdr.Name, off, err)
		}
	}
	// Hash what follows the end-of-archive marker too: the diffID is over
	// the whole stream.
	if tf == nil {
		if _, err := io.Copy(io.Discard, src); err != nil {
			return fmt.Errorf("tar: after the end of archive, at offset %d: %w", src.offset(), err)
		}
	}
	if l.flat != nil {
		return nil // a flattened image keeps no whiteout markers
	}
	return l.markDirs()
}

// markDirs gives the directories of the layer's overlay form
// (whiteout.Layer.Overlay) their overlayfs xattrs, sorted by directory:
// trusted.overlay.opaque where nothing below shows through, an empty
// trusted.overlay.origin where a whiteout is.
func (l *tarLayer) markDirs() error {
	ov, err := l.model.Overlay(nil)
	if err != nil {
		return err
	}
	var xs []whiteout.DirXattr
	ov.Walk(func(p string, n *whiteout.Node) error {
		if p == "." {
			p = ""
		}
		if n.IsDir() && n.Opaque {
			xs = append(xs, whiteout.DirXattr{Dir: p, Name: whiteout.OpaqueXattr, Value: []byte("y")})
		}
		if n.IsDir() && n.Origin {
			xs = append(xs, whiteout.DirXattr{Dir: p, Name: whiteout.OriginXattr, Value: []byte{}})
		}
		return nil
	})
	if l.rootOpaque != nil {
		var err error
		if xs, err = l.whiteOutLowerRoot(ov, xs); err != nil {
			return err
		}
	}
	slices.SortStableFunc(xs, func(a, b whiteout.DirXattr) int {
		return cmp.Or(strings.Compare(a.Dir, b.Dir), strings.Compare(a.Name, b.Name))
	})
	xs = slices.CompactFunc(xs, func(a, b whiteout.DirXattr) bool { return a.Dir == b.Dir && a.Name == b.Name })
	for _, x := range xs {
		if err := l.b.SetXattr(x.Dir, x.Name, x.Value); err != nil {
			return err
		}
	}
	return nil
}

func (l *tarLayer) addEntry(hdr *tar.Header, data io.Reader) error {
	p, err := erofs.CleanPath(hdr.Name)
	if err != nil {
		return err
	}
	// What the entry does to the layer's own whiteouts, before it is
	// in the layer's change set.
	linkWh := hdr.Typeflag == tar.TypeLink && l.linksWhiteout(hdr.Linkname)
	remade := l.remade(p)
	if err := l.model.Add(hdr); err != nil {
		return err
	}
	kind, target, err := l.wt.Classify(p)
	if err != nil {
		return err
	}
	// A char device 0:0, or a hard link to a whiteout (overlayfs makes
	// its whiteouts links of one inode), is a whiteout of p to overlayfs.
	dev0 := false
	switch {
	case kind != whiteout.Plain:
	case hdr.Typeflag == tar.TypeChar && hdr.Devmajor == 0 && hdr.Devminor == 0:
		if dev0 = l.wt.Device(p); dev0 {
			l.warnings = append(l.warnings, fmt.Sprintf("%s: a character device 0:0 is an overlayfs whiteout: it deletes %s of the layers below and does not show", p, p))
		}
	case linkWh:
		dev0 = l.wt.Device(p)
	}
	if l.flat != nil {
		if dev0 {
			kind = whiteout.Whiteout // a flattened image holds no whiteouts
		}
		return l.addFlat(hdr, p, kind, target, data)
	}
	for _, q := range remade {
		// Whited out, and made a new directory by the entry below.
		if n := l.model.Node(q); n != nil && n.IsDir() {
			if err := l.b.Imply(q); err != nil {
				return err
			}
		}
	}
	switch kind {
	case whiteout.Drop:
		return nil
	case whiteout.Opaque:
		if target == "" && l.rootOpaque == nil {
			l.rootOpaque = hdr
		}
		// Make sure the directory exists now; the xattr is set (again)
		// after the last entry, so a later entry for it cannot drop it.
		return l.b.SetXattr(target, whiteout.OpaqueXattr, []byte("y"))
	case whiteout.Whiteout:
		e := erofs.Entry{Path: target}
		if err := l.headerMeta(hdr, &e); err != nil {
			return err
		}
		l.entries++
		// No permission bits, as mkfs.erofs --aufs writes it and
		// containerd's and docker's appliers make it (mknod(S_IFCHR, 0)).
		e.Mode = erofs.S_IFCHR
		// A whiteout is a marker: the .wh. entry's xattrs do not carry over.
		e.Xattrs = nil
		return l.b.Add(e, nil)
	}
	e, ok, err := l.entryOf(hdr, p)
	if err != nil || !ok {
		return err
	}
	l.entries++
	if l.tarIndex && e.Mode&erofs.S_IFMT == erofs.S_IFREG && e.Size > 0 && !e.Sparse {
		return l.addIndexed(e)
	}
	return l.b.Add(e, data)
}

// whiteOutLowerRoot carries out the layer's opaque marker on the root,
// which overlayfs ignores there (it looks for the marker on directories
// it looks up, never on the root): the layer gets a whiteout, with the
// marker's owner and time, for each name the layers below have at the
// root and the layer (its overlay form ov) has not, and its own
// directories there are opaque: their xattrs are added to xs. Without
// the layers below (mkfs, a cache entry made of the layer alone) it can
// only warn.
func (l *tarLayer) whiteOutLowerRoot(ov *whiteout.Tree, xs []whiteout.DirXattr) ([]whiteout.DirXattr, error) {
	if l.lowerRoot == nil {
		l.warnings = append(l.warnings, "an opaque marker on the root: overlayfs ignores it there, and the layers below are not known here: what they have at the root shows through")
		return xs, nil
	}
	names, ok := l.lowerRoot()
	if !ok {
		return nil, errors.New("an opaque marker on the root: the layers below did not convert")
	}
	var meta erofs.Entry
	if err := l.headerMeta(l.rootOpaque, &meta); err != nil {
		return nil, err
	}
	meta.Mode, meta.Xattrs = erofs.S_IFCHR, nil
	for _, name := range names {
		switch n := ov.Node(name); {
		case n != nil && n.IsDir():
			xs = append(xs, whiteout.DirXattr{Dir: name, Name: whiteout.OpaqueXattr, Value: []byte("y")})
		case n == nil:
			e := meta
			e.Path = name
			if err := l.b.Add(e, nil); err != nil {
				return nil, err
			}
			xs = append(xs, whiteout.DirXattr{Name: whiteout.OriginXattr, Value: []byte{}})
		}
	}
	return xs, nil
}

// linksWhiteout reports whether a hard link to name links to a whiteout
// of the layer: the layer's last word on name was one.
func (l *tarLayer) linksWhiteout(name string) bool {
	p, err := erofs.CleanPath(name)
	if err != nil || !l.wt.WhitedOut(p) {
		return false
	}
	if l.flat != nil {
		return l.flat.lastWhiteout(p, l.rank)
	}
	n := l.model.Node(p)
	return n != nil && n.Whiteout
}

// remade returns the layer's whiteouts above p, which an entry at p makes
// new directories (.wh.d, then d/n): the layer's change set says which,
// once it has the entry (whiteout.Layer: nothing below shows through
// them, and the directories they are have no metadata from below).
func (l *tarLayer) remade(p string) []string {
	if !l.wt.AnyWhitedOut() {
		return nil
	}
	var qs []string
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			if n := l.model.Node(p[:i]); n != nil && n.Whiteout {
				qs = append(qs, p[:i])
			}
		}
	}
	return qs
}

// addIndexed adds a file whose data stays in the tar: one chunk, as large
// as the file, at its data's place in the tar (archive/tar has read just
// the header blocks, so the position is where the data starts). A sparse
// file's data is not contiguous in the tar: it is stored in the image.
func (l *tarLayer) addIndexed(e erofs.Entry) error {
	off := l.pos.offset()
	if off%tarBlock != 0 {
		return fmt.Errorf("data at offset %d: not on a 512-byte tar block", off)
	}
	bits := uint8(0)
	for int64(tarBlock)<<bits < e.Size {
		bits++
	}
	if off/tarBlock >= 1<<32-1 {
		return fmt.Errorf("data at offset %d: beyond the 2 TiB a tar index addresses", off)
	}
	return l.b.AddChunks(e, bits, []erofs.ChunkRef{{Device: 1, Block: uint32(off / tarBlock)}})
}

// tarBlock is the tar record unit, and the block size of a tar index.
const tarBlock = 512

// entryOf translates a tar header for the builder; ok is false for headers
// that are no file (pax global headers, volume labels).
func (l *tarLayer) entryOf(hdr *tar.Header, p string) (e erofs.Entry, ok bool, err error) {
	e.Path = p
	if err := l.headerMeta(hdr, &e); err != nil {
		return e, false, err
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse, tar.TypeCont:
		e.Mode |= erofs.S_IFREG
		e.Size = hdr.Size
		e.Sparse = isSparse(hdr)
	case tar.TypeDir:
		e.Mode |= erofs.S_IFDIR
	case tar.TypeSymlink:
		e.Mode |= erofs.S_IFLNK
		e.Linkname = hdr.Linkname
	case tar.TypeLink:
		lp, err := erofs.CleanPath(hdr.Linkname)
		if err != nil {
			return e, false, fmt.Errorf("hard link target %q: %w", hdr.Linkname, err)
		}
		e.HardLink = lp
		if lp == "" {
			return e, false, errors.New("hard link to the root")
		}
	case tar.TypeChar:
		e.Mode |= erofs.S_IFCHR
	case tar.TypeBlock:
		e.Mode |= erofs.S_IFBLK
	case tar.TypeFifo:
		e.Mode |= erofs.S_IFIFO
	case tar.TypeXGlobalHeader, 'V': // pax global header, GNU volume label
		return e, false, nil
	default:
		return e, false, fmt.Errorf("unsupported tar entry type %q", hdr.Typeflag)
	}
	if hdr.Typeflag == tar.TypeChar || hdr.Typeflag == tar.TypeBlock {
		if hdr.Devmajor < 0 || hdr.Devminor < 0 || hdr.Devmajor > 0xFFF || hdr.Devminor > 0xFFFFF {
			return e, false, fmt.Errorf("device %d:%d out of range", hdr.Devmajor, hdr.Devminor)
		}
		e.Devmajor, e.Devminor = uint32(hdr.Devmajor), uint32(hdr.Devminor)
	}
	return e, true, nil
}

// headerMeta copies ownership, mode bits, time and xattrs. An xattr that
// EROFS cannot name (outside user., trusted., security. and the ACLs) is
// left out with a warning, as the kernel could not show it anyway.
func (l *tarLayer) headerMeta(hdr *tar.Header, e *erofs.Entry) error {
	if hdr.Uid < 0 || int64(hdr.Uid) > 0xFFFFFFFF || hdr.Gid < 0 || int64(hdr.Gid) > 0xFFFFFFFF {
		return fmt.Errorf("uid/gid %d/%d out of range", hdr.Uid, hdr.Gid)
	}
	e.Uid, e.Gid = uint32(hdr.Uid), uint32(hdr.Gid)
	e.Mode = uint32(hdr.Mode) & 0o7777
	e.Mtime = hdr.ModTime
	n0 := len(l.warnings)
	for k, v := range hdr.PAXRecords {
		var name, value string
		switch {
		case strings.HasPrefix(k, "SCHILY.xattr."):
			name, value = k[len("SCHILY.xattr."):], v
		case strings.HasPrefix(k, "LIBARCHIVE.xattr."):
			n, err := url.PathUnescape(k[len("LIBARCHIVE.xattr."):])
			if err != nil {
				return fmt.Errorf("pax record %q: %w", k, err)
			}
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				if b, err = base64.RawStdEncoding.DecodeString(v); err != nil {
					return fmt.Errorf("pax record %q: bad base64 value", k)
				}
			}
			name, value = n, string(b)
		default:
			continue
		}
		if _, dup := hdr.PAXRecords["SCHILY.xattr."+name]; dup && strings.HasPrefix(k, "LIBARCHIVE.") {
			continue
		}
		if err := erofs.CheckXattrName(name); err != nil {
			l.warnings = append(l.warnings, fmt.Sprintf("%s: xattr %q left out: %v", e.Path, name, err))
			continue
		}
		if !l.wt.KeepXattr(name) {
			l.warnings = append(l.warnings, fmt.Sprintf("%s: xattr %q left out: overlayfs would act on it; a layer says what it hides with whiteouts", e.Path, name))
			continue
		}
		e.Xattrs = append(e.Xattrs, erofs.Xattr{Name: name, Value: []byte(value)})
	}
	if len(l.warnings) > n0+1 {
		slices.Sort(l.warnings[n0:]) // in name order, not the map's
	}
	return nil
}

// isSparse reports a GNU sparse file, old (type 'S') or PAX (GNU.sparse.*).
func isSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}
