package convert

import (
	"archive/tar"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
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

// tarLayer feeds one tar stream into a Builder. The layer's change set
// (whiteout.Layer) decides what its entries do to one another and to the
// layers below; the data of its files is written as it streams by, and
// once the tar is read its overlay form (or, flattened, the merged stack)
// is laid out in the image.
type tarLayer struct {
	b     *erofs.Builder
	mode  whiteout.Mode
	ops   *dirOps // publishes the change set, for the layers above
	model *whiteout.Layer
	// files are the files whose data is written, by their header.
	files    map[*tar.Header]*erofs.File
	warnings []string
	// flat, when set, merges this layer into an image of all layers, read
	// top-down.
	flat     *flattener
	progress func(read int64) // of a flattened image: bytes read of all layers
	// tarIndex, when set, leaves file data in the tar (extra device 1) and
	// indexes it from the image (mkfs --tar-index); pos is the tar offset.
	tarIndex bool
	pos      offsetReader
	// lower and bottom are Options.lower and Options.bottom.
	lower  func() (*whiteout.Tree, bool)
	bottom bool
	// maxTar is Options.MaxTarSize: a file whose header alone puts the
	// tar past it fails there, before its data is read.
	maxTar int64
	// entries and implied describe the layer's image once it is laid out:
	// its entries, and the directories the layer implies.
	entries int
	implied []string
	// prefetch, when set, holds the files a prefetch list names until
	// the tar is read (writePrefetched); tmpDir holds its spool.
	prefetch *prefetchSpool
	tmpDir   string
}

func newTarLayer(b *erofs.Builder, m whiteout.Mode) *tarLayer {
	return &tarLayer{b: b, mode: m, files: map[*tar.Header]*erofs.File{}}
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
	l.model = whiteout.NewLayer(l.mode)
	if l.ops != nil {
		l.ops.layer = l.model
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
	return nil
}

// addEntry takes the next header into the layer's change set and, where
// the header is now the one at its path, checks it and writes the data of
// a file.
func (l *tarLayer) addEntry(hdr *tar.Header, data io.Reader) error {
	if err := l.model.Add(hdr); err != nil {
		return err
	}
	p, err := whiteout.Clean(hdr.Name)
	if err != nil {
		return err
	}
	n := l.model.Node(p)
	switch {
	case n == nil || n.Hdr != hdr || n.LowerLink() != "":
		return nil // a whiteout or opaque marker named for another path, a link, no file
	case n.Whiteout:
		l.warnings = append(l.warnings, fmt.Sprintf("%s: a character device 0:0 is an overlayfs whiteout: it deletes %s of the layers below and does not show", p, p))
		return nil
	}
	if p == "." {
		p = ""
	}
	e, err := l.entryOf(hdr, p)
	if err != nil {
		return err
	}
	if e.Mode&erofs.S_IFMT != erofs.S_IFREG || e.Size == 0 {
		if w := l.prefetch.noData(p, e); w != "" {
			l.warnings = append(l.warnings, w)
		}
		return nil
	}
	if l.flat != nil {
		return l.flat.data(hdr, e, data)
	}
	return l.write(hdr, e, data)
}

// write writes the data of the file e, whose header is hdr.
func (l *tarLayer) write(hdr *tar.Header, e erofs.Entry, data io.Reader) error {
	var f *erofs.File
	var err error
	if l.prefetch != nil && !l.tarIndex {
		spooled, err := l.prefetch.take(hdr, e, data, l.tmpDir)
		if spooled || err != nil {
			return err
		}
	}
	if l.tarIndex && !e.Sparse {
		f, err = l.index(e)
	} else {
		f, err = l.b.WriteFile(e, data)
	}
	if err != nil {
		return err
	}
	l.files[hdr] = f
	return nil
}

// finish lays out the layer's overlay form. Directories it implies and a
// marker on the root depend on the layers below (Options.lower), which it
// waits for then; without them, the marker can only warn.
func (l *tarLayer) finish() error {
	l.model.Walk(func(p string, n *whiteout.Node) error {
		if n.IsDir() && n.Hdr == nil {
			l.implied = append(l.implied, "/"+strings.TrimPrefix(p, "."))
		}
		return nil
	})
	var below *whiteout.Tree
	switch {
	case l.lower != nil && (l.implied != nil || l.model.RootOpaque()):
		var ok bool
		if below, ok = l.lower(); !ok {
			return errLowerFailed
		}
	case l.lower == nil && l.model.RootOpaque():
		l.warnings = append(l.warnings, "an opaque marker on the root: overlayfs ignores it there, and the layers below are not known here: what they have at the root shows through")
	}
	ov, err := l.model.Overlay(below)
	if err != nil {
		return err
	}
	if l.bottom && ov.StripMarkers() {
		l.warnings = append(l.warnings, "the bottom layer's whiteouts and opaque markers are left out: nothing is below for them to hide (EROFS image spec §3.6)")
	}
	return l.place(ov)
}

// place lays out the tree t in the image: directories with their
// metadata (implied ones as the Builder makes them) and overlayfs
// markers, files linked to their written data, nodes of one header as
// hard links of one inode.
func (l *tarLayer) place(t *whiteout.Tree) error {
	meta := &tarLayer{mode: l.mode} // warnings were given as the tar was read
	first := map[*tar.Header]string{}
	return t.Walk(func(p string, n *whiteout.Node) error {
		if p == "." {
			p = ""
		} else {
			l.entries++
		}
		if n.IsDir() {
			return l.placeDir(meta, p, n)
		}
		if q, ok := first[n.Hdr]; ok {
			return l.b.Add(erofs.Entry{Path: p, HardLink: q}, nil)
		}
		first[n.Hdr] = p
		if f := l.files[n.Hdr]; f != nil {
			return l.b.Link(p, f)
		}
		var e erofs.Entry
		var err error
		if n.Named() {
			// No permission bits, as mkfs.erofs --aufs writes it and
			// containerd's and docker's appliers make it; a marker's
			// xattrs do not carry over.
			e.Path = p
			err = meta.headerMeta(n.Hdr, &e)
			e.Mode, e.Xattrs = erofs.S_IFCHR, nil
		} else {
			e, err = meta.entryOf(n.Hdr, p)
		}
		if err != nil {
			return fmt.Errorf("entry %q: %w", n.Hdr.Name, err)
		}
		return l.b.Add(e, nil)
	})
}

// placeDir lays out the directory n at p.
func (l *tarLayer) placeDir(meta *tarLayer, p string, n *whiteout.Node) error {
	if n.Hdr != nil {
		e, err := meta.entryOf(n.Hdr, p)
		if err != nil {
			return fmt.Errorf("entry %q: %w", n.Hdr.Name, err)
		}
		if err := l.b.Add(e, nil); err != nil {
			return err
		}
	} else if err := l.b.MkdirAll(p); err != nil {
		return err
	}
	if n.Opaque {
		if err := l.b.SetXattr(p, whiteout.OpaqueXattr, []byte("y")); err != nil {
			return err
		}
	}
	if n.Origin {
		return l.b.SetXattr(p, whiteout.OriginXattr, []byte{})
	}
	return nil
}

// index writes a file whose data stays in the tar: one chunk, as large
// as the file, at its data's place in the tar (archive/tar has read just
// the header blocks, so the position is where the data starts). A sparse
// file's data is not contiguous in the tar: it is stored in the image.
func (l *tarLayer) index(e erofs.Entry) (*erofs.File, error) {
	off := l.pos.offset()
	if off%tarBlock != 0 {
		return nil, fmt.Errorf("data at offset %d: not on a 512-byte tar block", off)
	}
	bits := uint8(0)
	for int64(tarBlock)<<bits < e.Size {
		bits++
	}
	if off/tarBlock >= 1<<32-1 {
		return nil, fmt.Errorf("data at offset %d: beyond the 2 TiB a tar index addresses", off)
	}
	return l.b.WriteChunks(e, bits, []erofs.ChunkRef{{Device: 1, Block: uint32(off / tarBlock)}})
}

// tarBlock is the tar record unit, and the block size of a tar index.
const tarBlock = 512

// entryOf translates the header of a file, directory, symlink, device
// or fifo for the builder.
func (l *tarLayer) entryOf(hdr *tar.Header, p string) (e erofs.Entry, err error) {
	e.Path = p
	if err := l.headerMeta(hdr, &e); err != nil {
		return e, err
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeGNUSparse, tar.TypeCont: // the tar reader makes TypeRegA TypeReg
		e.Mode |= erofs.S_IFREG
		e.Size = hdr.Size
		e.Sparse = isSparse(hdr)
	case tar.TypeDir:
		e.Mode |= erofs.S_IFDIR
	case tar.TypeSymlink:
		e.Mode |= erofs.S_IFLNK
		e.Linkname = hdr.Linkname
	case tar.TypeChar:
		e.Mode |= erofs.S_IFCHR
	case tar.TypeBlock:
		e.Mode |= erofs.S_IFBLK
	case tar.TypeFifo:
		e.Mode |= erofs.S_IFIFO
	default:
		return e, fmt.Errorf("unsupported tar entry type %q", hdr.Typeflag)
	}
	if hdr.Typeflag == tar.TypeChar || hdr.Typeflag == tar.TypeBlock {
		if hdr.Devmajor < 0 || hdr.Devminor < 0 || hdr.Devmajor > 0xFFF || hdr.Devminor > 0xFFFFF {
			return e, fmt.Errorf("device %d:%d out of range", hdr.Devmajor, hdr.Devminor)
		}
		e.Devmajor, e.Devminor = uint32(hdr.Devmajor), uint32(hdr.Devminor)
	}
	return e, nil
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
	xs, err := whiteout.Xattrs(hdr)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(xs)) {
		if err := erofs.CheckXattrName(name); err != nil {
			l.warnings = append(l.warnings, fmt.Sprintf("%s: xattr %q left out: %v", e.Path, name, err))
			continue
		}
		if !l.mode.KeepXattr(name) {
			l.warnings = append(l.warnings, fmt.Sprintf("%s: xattr %q left out: overlayfs would act on it; a layer says what it hides with whiteouts", e.Path, name))
			continue
		}
		e.Xattrs = append(e.Xattrs, erofs.Xattr{Name: name, Value: []byte(xs[name])})
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
