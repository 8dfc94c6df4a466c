package spec

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"

	"github.com/ocierofs/ocierofs/erofs"
)

// layerContents is what reading one EROFS layer found.
type layerContents struct {
	diffID  string // sha256 of the image data (the blob, or its zstd content)
	openErr error  // the image data is no EROFS image
	// The first of each, by path ("" for none): a whiteout (a character
	// device 0:0), a directory marked opaque, a name starting ".wh.".
	whiteout, opaque, dotWh string
}

// errTooLarge stops a read past Options.MaxLayerSize.
var errTooLarge = errors.New("layer larger than the bound on its size")

// readLayer copies a layer's image data to a temp file (decompressed, for
// +zstd), hashing it, and walks the image it holds.
func (c *checker) readLayer(img v1.Image, d v1.Descriptor) (*layerContents, error) {
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var r io.Reader = ctxReader{c.ctx, rc}
	if d.MediaType == MediaTypeErofsZstd {
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		r = zr
	}
	if c.opt.MaxLayerSize > 0 {
		r = &boundReader{r: r, left: c.opt.MaxLayerSize}
	}
	f, err := os.CreateTemp(c.opt.TempDir, "spec-layer-*")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	os.Remove(f.Name()) // nothing left behind, whatever happens
	h := sha256.New()
	n, err := io.Copy(f, io.TeeReader(r, h))
	if err != nil {
		return nil, fmt.Errorf("reading: %w", err)
	}
	lc := &layerContents{diffID: "sha256:" + hex.EncodeToString(h.Sum(nil))}
	ei, err := erofs.Open(f, n)
	if err != nil {
		lc.openErr = err
		return lc, nil
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
	if err != nil {
		if c.ctx.Err() != nil {
			return nil, c.ctx.Err()
		}
		lc.openErr = err
	}
	return lc, nil
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
