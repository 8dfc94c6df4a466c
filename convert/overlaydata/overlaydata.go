// Package overlaydata splits an EROFS image of a whole root filesystem
// into the two layers of the EROFS image spec's overlay-data form (§2.4):
// a data layer, a flat collection of the file payloads, each distinct
// content once under its SHA-256 (DataPath), and a metadata layer with
// the whole tree, whose regular files keep their size and attributes but
// no data: each carries overlayfs's metacopy xattr and a redirect to its
// payload in the data layer. Mounted as overlayfs with the metadata layer
// as the lower layer and the data layer as a data-only lower layer
// (lowerdir=META::DATA, metacopy=on), it shows the tree of the source.
package overlaydata

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"math/bits"
	"path"
	"slices"
	"time"

	"github.com/ocierofs/ocierofs/convert/imagefile"
	"github.com/ocierofs/ocierofs/convert/internal/outfile"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

// The overlayfs xattrs of a metadata-only file: metacopy marks it as one
// (an empty value: no fs-verity digest), redirect names its data's
// absolute path in a data-only lower layer.
const (
	MetacopyXattr = "trusted.overlay.metacopy"
	RedirectXattr = "trusted.overlay.redirect"
)

// DataPath is the path in the data layer of the content whose SHA-256
// is hexDigest: a directory per first two hex digits, then the whole
// digest ("ab/ab12…"), so that no directory gets very large.
func DataPath(hexDigest string) string { return hexDigest[:2] + "/" + hexDigest }

// Result describes a split.
type Result struct {
	// Entries are the metadata layer's paths.
	Entries int
	// Payloads are the data layer's files; PayloadBytes their size, and
	// DuplicateBytes what files of the same content would have added.
	Payloads                     int
	PayloadBytes, DuplicateBytes int64
}

// payload is a distinct content: a file that has it, by its inode.
type payload struct {
	path string
	ino  *erofs.Inode
}

// Split reads the image at src and writes the metadata layer to meta and
// the data layer to data, each with opt (the data layer's UUID derived
// from opt.UUID, so that the two differ).
func Split(src, meta, data string, opt erofs.Options) (res *Result, err error) {
	in, err := imagefile.Open(src)
	if err != nil {
		return nil, fmt.Errorf("overlaydata: %w", err)
	}
	defer in.Close()
	s := &splitter{img: in.Image, digests: map[uint64]string{}, payloads: map[string]payload{}, res: &Result{}}
	if err := s.hashFiles(); err != nil {
		return nil, fmt.Errorf("overlaydata: %s: %w", src, err)
	}
	var outs outfile.Set
	defer func() {
		if err != nil {
			outs.Abort()
		}
	}()
	dataOpt := opt
	dataOpt.UUID = dataUUID(opt.UUID)
	dataOpt.NoDedupe = true // the payloads are distinct by their SHA-256
	if err := s.write(&outs, data, dataOpt, s.writeData); err != nil {
		return nil, fmt.Errorf("overlaydata: data layer: %w", err)
	}
	if err := s.write(&outs, meta, opt, s.writeMeta); err != nil {
		return nil, fmt.Errorf("overlaydata: metadata layer: %w", err)
	}
	if err := outs.Commit(); err != nil {
		return nil, err
	}
	return s.res, nil
}

// splitter holds what the two passes over the image share.
type splitter struct {
	img *erofs.Image
	// digests are the hex SHA-256 of each non-empty regular inode, by nid.
	digests map[uint64]string
	// payloads are the distinct contents, by hex digest.
	payloads map[string]payload
	res      *Result
}

// hashFiles hashes each non-empty regular inode's data once.
func (s *splitter) hashFiles() error {
	return s.img.Walk(".", func(p string, ino *erofs.Inode) error {
		if !ino.IsRegular() || ino.Size == 0 {
			return nil
		}
		if _, done := s.digests[ino.Nid]; done {
			return nil
		}
		h := sha256.New()
		if err := s.copyData(h, p, ino); err != nil {
			return err
		}
		d := hex.EncodeToString(h.Sum(nil))
		s.digests[ino.Nid] = d
		if _, dup := s.payloads[d]; dup {
			s.res.DuplicateBytes += ino.Size
			return nil
		}
		s.payloads[d] = payload{path: p, ino: ino}
		s.res.Payloads++
		s.res.PayloadBytes += ino.Size
		return nil
	})
}

// copyBuf is copyData's buffer size: a read of the image per block
// would be a system call per block.
const copyBuf = 1 << 20

// copyData copies the data of the file at p, whose inode is ino, to w.
func (s *splitter) copyData(w io.Writer, p string, ino *erofs.Inode) error {
	r, err := s.img.DataReader(ino)
	if err == nil {
		_, err = io.CopyBuffer(w, r, make([]byte, min(copyBuf, max(ino.Size, 1))))
	}
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// write makes an image at out with opt, its entries added by add.
func (s *splitter) write(outs *outfile.Set, out string, opt erofs.Options, add func(*erofs.Builder) error) error {
	f, err := outs.Create(out)
	if err != nil {
		return err
	}
	if opt.BlockSize == 0 {
		opt.BlockSize = int(s.img.Super().BlockSize)
	}
	b, err := erofs.NewBuilder(f, opt)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := add(b); err != nil {
		return err
	}
	return b.Finish()
}

// epoch is the data layer's one timestamp: its files are named by their
// content, and nothing of the source's time belongs to them.
var epoch = time.Unix(0, 0)

// writeData adds each distinct content at its DataPath, in digest order.
func (s *splitter) writeData(b *erofs.Builder) error {
	dir := func(p string) erofs.Entry {
		return erofs.Entry{Path: p, Mode: erofs.S_IFDIR | 0o755, Mtime: epoch}
	}
	if err := b.Add(dir("."), nil); err != nil {
		return err
	}
	lastDir := ""
	for _, d := range slices.Sorted(maps.Keys(s.payloads)) {
		p := DataPath(d)
		if dp := path.Dir(p); dp != lastDir {
			if err := b.Add(dir(dp), nil); err != nil {
				return err
			}
			lastDir = dp
		}
		pl := s.payloads[d]
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(s.copyData(pw, pl.path, pl.ino)) }()
		err := b.Add(erofs.Entry{Path: p, Mode: erofs.S_IFREG | 0o644, Mtime: epoch, Size: pl.ino.Size}, pr)
		pr.CloseWithError(io.ErrClosedPipe)
		if err != nil {
			return err
		}
	}
	return nil
}

// writeMeta adds every path of the image: a non-empty regular file as a
// metadata-only file (metaFile), the rest as they are; hard links stay
// links. Overlayfs xattrs of the image are left out: in the metadata
// layer, overlayfs would act on them.
func (s *splitter) writeMeta(b *erofs.Builder) error {
	first := map[uint64]string{}
	return s.img.Walk(".", func(p string, ino *erofs.Inode) error {
		s.res.Entries++
		if !ino.IsDir() && ino.Nlink > 1 {
			if f, ok := first[ino.Nid]; ok {
				return b.Add(erofs.Entry{Path: p, HardLink: f}, nil)
			}
			first[ino.Nid] = p
		}
		e, err := s.entry(p, ino)
		if err != nil {
			return err
		}
		if d, ok := s.digests[ino.Nid]; ok {
			e.Size = ino.Size
			return metaFile(b, e, d)
		}
		if ino.IsRegular() {
			return b.Add(e, bytes.NewReader(nil)) // empty
		}
		return b.Add(e, nil)
	})
}

// entry is the metadata layer's entry of the image's path p, but for a
// regular file's data.
func (s *splitter) entry(p string, ino *erofs.Inode) (erofs.Entry, error) {
	e := erofs.Entry{
		Path: p, Mode: ino.Mode, Uid: ino.Uid, Gid: ino.Gid, Mtime: ino.Mtime,
		Devmajor: ino.Devmajor, Devminor: ino.Devminor,
	}
	xs, err := s.img.InodeXattrs(ino)
	if err != nil {
		return e, fmt.Errorf("%s: %w", p, err)
	}
	for _, x := range xs {
		if whiteout.Overlay.KeepXattr(x.Name) {
			e.Xattrs = append(e.Xattrs, x)
		}
	}
	if ino.IsSymlink() {
		if e.Linkname, err = s.img.ReadlinkInode(ino); err != nil {
			return e, fmt.Errorf("%s: %w", p, err)
		}
	}
	return e, nil
}

// metaFile adds e, a regular file of e.Size bytes whose content has the
// hex SHA-256 d, as overlayfs's metadata-only file: its size, no data
// blocks (one chunk, a hole), and the xattrs that send reads to the data
// layer.
func metaFile(b *erofs.Builder, e erofs.Entry, d string) error {
	e.Xattrs = append(e.Xattrs,
		erofs.Xattr{Name: MetacopyXattr, Value: []byte{}},
		erofs.Xattr{Name: RedirectXattr, Value: []byte("/" + DataPath(d))})
	cbits, n := holeChunks(e.Size, b.BlockSize())
	refs := make([]erofs.ChunkRef, n)
	for i := range refs {
		refs[i].Hole = true
	}
	return b.AddChunks(e, cbits, refs)
}

// maxChunkBits is the widest chunk EROFS can say, in blocks' bits.
const maxChunkBits = 31

// holeChunks are the chunk bits (over the block size bs) of the fewest
// chunks that cover size bytes, and their number.
func holeChunks(size int64, bs int) (uint8, int) {
	blkbits := bits.TrailingZeros(uint(bs))
	cbits := max(0, min(maxChunkBits, bits.Len64(uint64(size-1))-blkbits))
	chunk := int64(1) << (blkbits + cbits)
	return uint8(cbits), int((size + chunk - 1) / chunk)
}

// dataUUID is the data layer's UUID, derived from the metadata layer's
// (an RFC 4122 version 5 UUID, as the converter's are); a zero UUID
// stays zero, for the builder to pick.
func dataUUID(u [16]byte) [16]byte {
	if u == ([16]byte{}) {
		return u
	}
	h := sha256.Sum256(append([]byte("overlay-data:"), u[:]...))
	var d [16]byte
	copy(d[:], h[:])
	d[6] = d[6]&0x0f | 0x50
	d[8] = d[8]&0x3f | 0x80
	return d
}
