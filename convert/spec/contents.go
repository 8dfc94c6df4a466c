package spec

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"

	"github.com/ocierofs/ocierofs/convert/dmverity"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/oci/chunkindex"
)

// layerContents is what reading one EROFS layer found.
type layerContents struct {
	diffID  string // sha256 of the image data (the blob, or its zstd content)
	openErr error  // the image data is no EROFS image
	// The first of each, by path ("" for none): a whiteout (a character
	// device 0:0), a directory marked opaque, a name starting ".wh.".
	whiteout, opaque, dotWh string
	// chunk says what is wrong with the layer's chunk index (embedded or
	// the standalone one after it), verity with its dm-verity tree; ""
	// for nothing. chunkNoSums: an index without per-chunk checksums.
	chunk, verity string
	chunkNoSums   bool
	// payloads are an overlay-data layer's regular files, their sizes by
	// absolute path; redirects are another layer's overlayfs metacopy
	// files (its whole redirect is the data's path, §2.4).
	payloads  map[string]int64
	redirects []redirect
}

// redirect is a metacopy file: its path, its size and the absolute path
// of its data, as trusted.overlay.redirect gives it.
type redirect struct {
	path, target string
	size         int64
}

// The overlayfs xattrs of a metadata-only file (overlay-data, §2.4).
const (
	metacopyXattr = "trusted.overlay.metacopy"
	redirectXattr = "trusted.overlay.redirect"
)

// errTooLarge stops a read past Options.MaxLayerSize.
var errTooLarge = errors.New("layer larger than the bound on its size")

// readLayer copies a layer's image data to a temp file (decompressed, for
// +zstd), hashing it, walks the image it holds and checks its chunk index
// (embedded, or next, the standalone layer after it) and dm-verity tree.
func (c *checker) readLayer(img v1.Image, d v1.Descriptor, next *v1.Descriptor) (*layerContents, error) {
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		return nil, err
	}
	_, embedded := d.Annotations[AnnotationChunkRange]
	var blob *os.File // a +zstd layer's blob as it is, for its chunk index
	var blobSize int64
	if d.MediaType == MediaTypeErofsZstd && (embedded || next != nil) {
		if blob, blobSize, err = c.spool(l, false); err != nil {
			return nil, err
		}
		defer blob.Close()
	}
	f, n, err := c.spool(l, d.MediaType == MediaTypeErofsZstd)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, n)); err != nil {
		return nil, err
	}
	lc := &layerContents{diffID: "sha256:" + hex.EncodeToString(h.Sum(nil))}
	if blob == nil {
		blob, blobSize = f, n
	}
	dataEnd := n
	x := c.chunkIndex(img, d, next, blob, blobSize, lc)
	if x != nil && x.Compression == chunkindex.None && x.DataEnd != 0 && int64(x.DataEnd) < n {
		dataEnd = int64(x.DataEnd) // a raw layer's image data ends where its index starts
	}
	if x != nil {
		checkChunks(x, blob, f, dataEnd, lc)
	}
	checkVerity(d, f, dataEnd, lc)
	c.walk(f, n, d.Annotations[AnnotationRole], lc)
	if err := c.ctx.Err(); err != nil {
		return nil, err
	}
	return lc, nil
}

// spool copies a layer's blob, decompressed if unzstd, into an unnamed
// temp file.
func (c *checker) spool(l v1.Layer, unzstd bool) (*os.File, int64, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, 0, err
	}
	defer rc.Close()
	var r io.Reader = ctxReader{c.ctx, rc}
	if unzstd {
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, 0, err
		}
		defer zr.Close()
		r = zr
	}
	if c.opt.MaxLayerSize > 0 {
		r = &boundReader{r: r, left: c.opt.MaxLayerSize}
	}
	f, err := os.CreateTemp(c.opt.TempDir, "spec-layer-*")
	if err != nil {
		return nil, 0, err
	}
	os.Remove(f.Name()) // nothing left behind, whatever happens
	n, err := io.Copy(f, r)
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("reading: %w", err)
	}
	return f, n, nil
}

// chunkIndex reads the layer's chunk index, embedded or the standalone
// one next; nil where it has none or it is unreadable (said in lc).
func (c *checker) chunkIndex(img v1.Image, d v1.Descriptor, next *v1.Descriptor, blob io.ReaderAt, blobSize int64, lc *layerContents) *chunkindex.Index {
	zstdLayer := d.MediaType == MediaTypeErofsZstd
	if r, ok := d.Annotations[AnnotationChunkRange]; ok && !reRange.MatchString(r) {
		return nil // section2_3 says it
	}
	x, err := chunkindex.Embedded(blob, blobSize, zstdLayer, d.Annotations)
	if err != nil {
		lc.chunk = "embedded chunk index: " + err.Error()
		return nil
	}
	if x == nil && next != nil {
		payload, err := ReadChunkIndexBlob(img, *next)
		if err != nil {
			lc.chunk = "standalone chunk index " + next.Digest.String() + ": " + err.Error()
			return nil
		}
		if x, err = chunkindex.Standalone(payload, next.Annotations, d.Digest.String(), d.Size, zstdLayer); err != nil {
			lc.chunk = "standalone chunk index " + next.Digest.String() + ": " + err.Error()
			return nil
		}
	}
	if x != nil && x.HashAlgo == chunkindex.HashNone {
		lc.chunkNoSums = true
	}
	return x
}

// checkChunks reads every chunk of x from blob (checksums checked) and
// compares it with the image data, size bytes of data.
func checkChunks(x *chunkindex.Index, blob, data io.ReaderAt, size int64, lc *layerContents) {
	if int64(x.UncompressedSize) != size {
		lc.chunk = fmt.Sprintf("UncompressedSize %d, but the image data has %d bytes", x.UncompressedSize, size)
		return
	}
	r, err := chunkindex.NewReader(blob, x)
	if err != nil {
		lc.chunk = err.Error()
		return
	}
	var buf []byte
	for i := range x.Len() {
		got, err := r.ReadChunk(i)
		if err != nil {
			lc.chunk = err.Error()
			return
		}
		ch := x.Chunk(i)
		buf = append(buf[:0], make([]byte, len(got))...)
		if _, err := data.ReadAt(buf, int64(ch.UncompressedOffset)); err != nil || !bytes.Equal(buf, got) {
			lc.chunk = fmt.Sprintf("chunk %d (image bytes %d to %d) is not the image data there", i, ch.UncompressedOffset, ch.UncompressedOffset+ch.Len)
			return
		}
	}
}

// checkVerity checks the dm-verity tree d's annotations place in the
// image data (size bytes of data); their grammar is section2_3's.
func checkVerity(d v1.Descriptor, data io.ReaderAt, size int64, lc *layerContents) {
	off, ok1 := parseUint(d.Annotations[AnnotationHashOffset])
	root, hasRoot := d.Annotations[AnnotationRootDigest]
	bs := uint64(4096)
	ok2 := true
	if v, has := d.Annotations[AnnotationBlockSize]; has {
		bs, ok2 = parseUint(v)
	}
	if !ok1 || !hasRoot || !ok2 || bs == 0 || off%bs != 0 {
		return
	}
	if ei, err := erofs.Open(io.NewSectionReader(data, 0, size), size); err == nil {
		if n := uint64(ei.Super().Blocks) * uint64(ei.Super().BlockSize); n > off {
			lc.verity = fmt.Sprintf("hash_offset %d is inside the EROFS image (%d bytes)", off, n)
			return
		}
	}
	if off >= uint64(size) {
		lc.verity = fmt.Sprintf("hash_offset %d is past the image data's %d bytes", off, size)
		return
	}
	sb := make([]byte, 512)
	if _, err := data.ReadAt(sb, int64(off)); err != nil || string(sb[:8]) != "verity\x00\x00" {
		lc.verity = fmt.Sprintf("no dm-verity superblock at hash_offset %d", off)
		return
	}
	alg, hexRoot, _ := strings.Cut(root, ":")
	le := binary.LittleEndian
	if alg != "sha256" || string(bytes.TrimRight(sb[32:64], "\x00")) != "sha256" || uint64(le.Uint32(sb[64:])) != bs ||
		le.Uint32(sb[68:]) != dmverity.BlockSize || le.Uint16(sb[80:]) != 32 || !bytes.Equal(sb[88:120], make([]byte, 32)) {
		return // parameters this checker does not verify the tree of
	}
	if err := dmverity.Verify(io.NewSectionReader(data, 0, size), dmverity.Metadata{RootHash: hexRoot, HashOffset: off}); err != nil {
		lc.verity = err.Error()
	}
}

// ReadChunkIndexBlob reads the blob of d, a standalone chunk index,
// whole; one larger than a chunk index may be is refused unread.
func ReadChunkIndexBlob(img v1.Image, d v1.Descriptor) ([]byte, error) {
	const max = chunkindex.MaxPayload
	if d.Size > max {
		return nil, fmt.Errorf("%d bytes, more than the %d a chunk index may have", d.Size, max)
	}
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, max+1))
}

// walk opens the image data as an EROFS image and looks for whiteouts,
// opaque directories and .wh. names.
func (c *checker) walk(f io.ReaderAt, n int64, role string, lc *layerContents) {
	ei, err := erofs.Open(f, n)
	if err != nil {
		lc.openErr = err
		return
	}
	if role == RoleOverlayData {
		lc.payloads = map[string]int64{}
	}
	err = ei.Walk(".", func(p string, ino *erofs.Inode) error {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		base := p[strings.LastIndexByte(p, '/')+1:]
		if lc.dotWh == "" && strings.HasPrefix(base, ".wh.") {
			lc.dotWh = "/" + p
		}
		if lc.whiteout == "" && ino.Mode&erofs.S_IFMT == erofs.S_IFCHR && ino.Devmajor == 0 && ino.Devminor == 0 {
			lc.whiteout = "/" + p
		}
		if ino.IsRegular() {
			return c.regular(ei, p, ino, role, lc)
		}
		if lc.opaque == "" && ino.IsDir() {
			xs, err := ei.InodeXattrs(ino)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			for _, x := range xs {
				if x.Name == "trusted.overlay.opaque" && string(x.Value) == "y" {
					lc.opaque = "/" + strings.TrimPrefix(p, ".")
				}
			}
		}
		return nil
	})
	if err != nil && c.ctx.Err() == nil {
		lc.openErr = err
	}
}

// regular notes the regular file at p: an overlay-data layer's payload,
// or, in a layer that may consume one, a metacopy file's redirect.
func (c *checker) regular(ei *erofs.Image, p string, ino *erofs.Inode, role string, lc *layerContents) error {
	switch role {
	case RoleOverlayData:
		lc.payloads["/"+p] = ino.Size
		return nil
	case RoleDevice:
		return nil
	}
	xs, err := ei.InodeXattrs(ino)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	r := redirect{path: "/" + p, size: ino.Size}
	meta := false
	for _, x := range xs {
		switch x.Name {
		case metacopyXattr:
			meta = true
		case redirectXattr:
			r.target = string(x.Value)
		}
	}
	if meta {
		lc.redirects = append(lc.redirects, r)
	}
	return nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

type boundReader struct {
	r    io.Reader
	left int64
}

func (b *boundReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, _ := b.r.Read(one[:]); n > 0 {
			return 0, errTooLarge
		}
		return 0, io.EOF
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}
