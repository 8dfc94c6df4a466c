package convert

import (
	"context"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/oci"
)

// TwinHooks adapt WriteTwin to its caller. Each is optional.
type TwinHooks struct {
	// Index and Image give what to convert in place of the artifact's
	// own index or image (the mirror serves layers it converted before).
	Index func(*oci.Artifact) (v1.ImageIndex, error)
	Image func(v1.Image, v1.Descriptor) (v1.Image, error)
	// Converted runs once the twin is made, before it is written; write
	// false leaves the target as it is (the mirror, whose source tag
	// moved on meanwhile).
	Converted func(images []*ImageReport) (write bool, err error)
}

// A Twin is what WriteTwin made.
type Twin struct {
	Digest  string
	Index   bool
	Images  []*ImageReport
	Written bool
}

// WriteTwin converts art, an index or an image, and writes its EROFS twin
// to dst through rem: the one way `ocierofs convert` and the mirror make a
// twin. Refusing what is converted already (Converted) and choosing the
// target stay with the caller.
func (c *Converter) WriteTwin(ctx context.Context, art *oci.Artifact, dst oci.Ref, rem oci.Remote, h TwinHooks) (*Twin, error) {
	tw := &Twin{Index: art.Index != nil}
	var img v1.Image
	var idx v1.ImageIndex
	if art.Index != nil {
		src := art.Index
		if h.Index != nil {
			var err error
			if src, err = h.Index(art); err != nil {
				return nil, err
			}
		}
		var rep *IndexReport
		var err error
		if idx, rep, err = c.Index(ctx, src, art.Descriptor); err != nil {
			return nil, err
		}
		tw.Digest, tw.Images = rep.Digest, rep.Images
	} else {
		src := art.Image
		if h.Image != nil {
			var err error
			if src, err = h.Image(art.Image, art.Descriptor); err != nil {
				return nil, err
			}
		}
		var rep *ImageReport
		var err error
		if img, rep, err = c.Image(ctx, src, art.Descriptor); err != nil {
			return nil, err
		}
		tw.Digest, tw.Images = rep.Digest, []*ImageReport{rep}
	}
	if h.Converted != nil {
		write, err := h.Converted(tw.Images)
		if err != nil || !write {
			return tw, err
		}
	}
	if err := oci.Write(ctx, dst, img, idx, rem); err != nil {
		return nil, err
	}
	tw.Written = true
	return tw, nil
}
