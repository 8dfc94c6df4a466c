package check

import (
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/overlaydata"
	"github.com/ocierofs/ocierofs/convert/spec"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/whiteout"
)

// overlayDataLayout reports whether layers (standalone chunk indexes left
// out) are the overlay-data layout (convert.LayoutOverlayData) of the
// source layers chain: an overlay-data layer, and a role-less layer after
// it named after all of them.
func overlayDataLayout(layers []v1.Descriptor, chain string) bool {
	if len(layers) != 2 || layers[0].Annotations[spec.AnnotationRole] != spec.RoleOverlayData {
		return false
	}
	_, has := layers[1].Annotations[spec.AnnotationRole]
	return !has && layers[1].Annotations[convert.AnnotationSourceLayer] == chain
}

// overlayDataMeta checks the overlay-data layout's metadata layer meta
// against want, the source's layers stacked, as overlayfs shows it over
// the data layer data: each metacopy file's content is that of the data
// layer's file its redirect names.
func (c *checker) overlayDataMeta(where string, img v1.Image, data, meta v1.Descriptor, dataDiffID, metaDiffID v1.Hash, want *fstree.Tree) error {
	dt, err := c.dataLayer(where+": data layer", img, data, dataDiffID)
	if err != nil || dt == nil {
		return err
	}
	c.redirects = dt
	defer func() { c.redirects = nil }()
	return c.layer(where+": metadata layer", img, meta, metaDiffID, v1.Descriptor{}, want, false)
}

// dataLayer checks the data layer d's blob (its digests, its chunk index
// and dm-verity tree) and returns its tree; nil if it is no EROFS image.
func (c *checker) dataLayer(where string, img v1.Image, d v1.Descriptor, diffID v1.Hash) (*fstree.Tree, error) {
	c.res.Layers++
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	f, size, raw, comp, err := c.spool(l)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", where, d.Digest, err)
	}
	defer f.Close()
	if want := layerCompression(d.MediaType); comp != want {
		c.diff(where, "a %s blob, but its media type %s says %s", comp, d.MediaType, want)
	}
	if raw != diffID {
		c.diff(where, "the raw image's digest is %s, the config's diff_id %s", raw, diffID)
	}
	if err := c.specLayer(where, l, d, f, size); err != nil {
		return nil, err
	}
	ei, err := erofs.Open(f, size)
	if err != nil {
		c.diff(where, "not an EROFS image: %v", err)
		return nil, nil
	}
	t, err := fstree.FromImage(ei)
	if err != nil {
		c.diff(where, "reading the EROFS image: %v", err)
		return nil, nil
	}
	return t, nil
}

// resolveRedirects makes got, the metadata layer's tree, what overlayfs
// shows over c.redirects: each metacopy file gets the content of the data
// file its redirect names, and the overlayfs xattrs go.
func (c *checker) resolveRedirects(where string, got *fstree.Tree) {
	type redirect struct {
		n      *fstree.Node
		target string
	}
	var rs []redirect
	for _, p := range got.Paths() {
		n := got.Node(p)
		r, hasR := n.Xattrs[overlaydata.RedirectXattr]
		_, hasM := n.Xattrs[overlaydata.MetacopyXattr]
		switch {
		case hasR != hasM:
			c.diff(where, "%s: metacopy %v, redirect %v: overlayfs needs both", p, hasM, hasR)
		case hasR:
			rs = append(rs, redirect{n, r})
		}
	}
	for _, r := range rs {
		d := c.redirects.Node(strings.TrimPrefix(r.target, "/"))
		switch {
		case !strings.HasPrefix(r.target, "/"):
			c.diff(where, "%s: redirect %q is not absolute: overlayfs follows none other into a data-only layer", r.n.Path, r.target)
		case d == nil || d.Type() != erofs.S_IFREG:
			c.diff(where, "%s: redirect %s: no such file in the data layer", r.n.Path, r.target)
		case d.Size != r.n.Size:
			c.diff(where, "%s: %d bytes, its data %s in the data layer %d", r.n.Path, r.n.Size, r.target, d.Size)
		default:
			r.n.Digest = d.Digest
		}
	}
	for _, p := range got.Paths() {
		for x := range got.Node(p).Xattrs {
			if !whiteout.Overlay.KeepXattr(x) {
				delete(got.Node(p).Xattrs, x)
			}
		}
	}
}
