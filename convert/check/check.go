// Package check compares a converted image or index with its source
// through their readers, with no mount and no root (ocierofs check): each
// EROFS layer's tree against its source layer's, the config, the
// annotations that link them, and the EROFS image spec's parts of a layer
// (chunk indexes, dm-verity trees) against the data they describe.
//
//	res, err := check.Converted(ctx, converted, source, check.Options{Report: log})
package check

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/internal/atomicfile"
	"github.com/ocierofs/ocierofs/oci"
	"github.com/ocierofs/ocierofs/oci/chunkindex"
	"github.com/ocierofs/ocierofs/whiteout"
)

// Options tells Converted where to work and where to report.
type Options struct {
	// TempDir holds one EROFS layer at a time while it is read (default
	// $TMPDIR); the file is removed as soon as it is made.
	TempDir string
	// Report receives each difference found, one line each.
	Report func(string)
	// MaxLayerSize, if positive, bounds each source layer's uncompressed
	// tar (Options.MaxTarSize) and the raw image in each zstd-compressed
	// EROFS layer: a small compressed blob cannot fill TempDir, or run
	// the check on without end. An uncompressed EROFS blob is not
	// bounded: it takes the disk its descriptor says, and it may be
	// larger than the tar it was made from (small files in whole
	// blocks; a flattened image holds all layers).
	MaxLayerSize int64
}

// Result counts what Converted compared and what differed.
type Result struct {
	Images, Layers, Paths int
	Differences           int
}

// Converted compares a converted image, or index, with the one it was
// converted from, through their readers (no mount, no root), and reports every
// difference:
//
//   - each converted manifest names its source (convert.AnnotationSourceManifest),
//     each EROFS layer its source layer (convert.AnnotationSourceLayer), or, for
//     a manifest without the annotation, its subject is the source (the
//     layers' annotations are then not looked for); an index
//     has an entry of each platform it converted, with the source's
//     platform ("erofs" added to os.features, if at all);
//   - an EROFS layer's diff_id is the SHA-256 of the raw image (of the
//     image inside, for a zstd-compressed layer);
//   - each layer's tree is its source layer's, whiteouts in overlayfs's
//     form, the directories it only implies as the layers below leave
//     them; a flattened image's one layer is the source's layers stacked,
//     and so is the metadata layer of the device layout
//     (convert.LayoutDevice), read through the device layers (device.go),
//     and the metadata layer of the overlay-data layout
//     (convert.LayoutOverlayData), its files' contents those of the data
//     layer's files they redirect to (overlaydata.go);
//   - the config is the source's but for rootfs.diff_ids, "erofs" in
//     os.features and, flattened, the history;
//   - the EROFS image spec's parts of a layer, where it has them: its
//     chunk index (embedded, or a standalone layer after it) chunk by
//     chunk against the checksums and the image data, its dm-verity tree
//     block by block against its annotations (spec.go).
//
// The error is for what kept the check from going on: an unreadable blob,
// a layer missing.
func Converted(ctx context.Context, conv, src *oci.Artifact, opt Options) (*Result, error) {
	c := &checker{ctx: ctx, opt: opt, res: &Result{}}
	if c.opt.Report == nil {
		c.opt.Report = func(string) {}
	}
	var err error
	switch {
	case conv.Index != nil && src.Index != nil:
		err = c.index(conv.Ref.String(), conv.Index, src.Index)
	case conv.Image != nil && src.Image != nil:
		err = c.image(conv.Ref.String(), conv.Image, src.Image, src.Descriptor.Digest)
	case conv.Index != nil:
		err = c.mixed(conv.Ref.String(), conv.Index, src.Image, src.Descriptor.Digest)
	default:
		c.diff(conv.Ref.String(), "an image, and the source %s an index", src.Ref)
	}
	return c.res, err
}

type checker struct {
	ctx context.Context
	opt Options
	res *Result
	// standalone are the standalone chunk indexes of the image being
	// checked, by the digest of the layer each indexes.
	standalone map[v1.Hash]*chunkindex.Index
	// bySubject: the image checked names its source by its subject
	// alone, as another tool's conversion may; it need not carry
	// ocierofs' source annotations.
	bySubject bool
	// redirects, while the overlay-data layout's metadata layer is
	// checked, is its data layer's tree (resolveRedirects).
	redirects *fstree.Tree
}

func (c *checker) diff(where, format string, args ...any) {
	c.res.Differences++
	c.opt.Report(where + ": " + fmt.Sprintf(format, args...))
}

// mixed checks the index convert --merge-platform makes of an image: the
// source image itself and its conversions, each checked against it.
func (c *checker) mixed(where string, conv v1.ImageIndex, src v1.Image, srcDigest v1.Hash) error {
	raw, err := conv.RawManifest()
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if s := convert.SourceAnnotation(raw); s != srcDigest.String() {
		c.diff(where, "an index, and the source an image, which it does not name as its source (%q)", s)
		return nil
	}
	im, err := conv.IndexManifest()
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	converted := 0
	for _, d := range im.Manifests {
		at := where + "@" + d.Digest.String()
		switch {
		case d.Digest == srcDigest:
			continue // the source, as it is
		case !d.MediaType.IsImage():
			c.diff(at, "neither an image converted from the source nor the source")
			continue
		}
		img, err := conv.Image(d.Digest)
		if err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		converted++
		if err := c.image(at, img, src, srcDigest); err != nil {
			return err
		}
	}
	if converted == 0 {
		c.diff(where, "holds no conversion of the source")
	}
	return nil
}

// index checks each entry of conv against the source entry it names.
func (c *checker) index(where string, conv, src v1.ImageIndex) error {
	raw, err := conv.RawManifest()
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	srcDigest, err := src.Digest()
	if err != nil {
		return fmt.Errorf("%s: source: %w", where, err)
	}
	if s := convert.SourceAnnotation(raw); s != srcDigest.String() {
		c.diff(where, "names its source %q, not %s", s, srcDigest)
	}
	im, err := conv.IndexManifest()
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	sm, err := src.IndexManifest()
	if err != nil {
		return fmt.Errorf("%s: source: %w", where, err)
	}
	converted := 0
	defer func() {
		if converted == 0 {
			c.diff(where, "converts none of the source's %d entries", len(sm.Manifests))
		}
	}()
	for _, d := range im.Manifests {
		at := where + "@" + d.Digest.String()
		// The entry, read once: an index or an image; anything else
		// (an attestation, say) names no source.
		var childIndex v1.ImageIndex
		var childImage v1.Image
		var raw []byte
		var err error
		switch {
		case d.MediaType.IsIndex():
			if childIndex, err = conv.ImageIndex(d.Digest); err == nil {
				raw, err = childIndex.RawManifest()
			}
		case d.MediaType.IsImage():
			if childImage, err = conv.Image(d.Digest); err == nil {
				raw, err = childImage.RawManifest()
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		from := convert.SourceAnnotation(raw)
		if from == "" {
			// Not converted: it must be the source's, as it is.
			if !slices.ContainsFunc(sm.Manifests, func(s v1.Descriptor) bool { return s.Digest == d.Digest }) {
				c.diff(at, "neither converted nor an entry of the source")
			}
			continue
		}
		i := slices.IndexFunc(sm.Manifests, func(s v1.Descriptor) bool { return s.Digest.String() == from })
		if i < 0 {
			c.diff(at, "names its source %s, which the source index does not hold", from)
			continue
		}
		converted++
		s := sm.Manifests[i]
		if !samePlatform(d.Platform, s.Platform) {
			c.diff(at, "platform %+v, the source's %+v", d.Platform, s.Platform)
		}
		if childIndex != nil {
			schild, err := src.ImageIndex(s.Digest)
			if err != nil {
				return fmt.Errorf("%s: source %s: %w", at, s.Digest, err)
			}
			if err := c.index(at, childIndex, schild); err != nil {
				return err
			}
			continue
		}
		simg, err := src.Image(s.Digest)
		if err != nil {
			return fmt.Errorf("%s: source %s: %w", at, s.Digest, err)
		}
		if err := c.image(at, childImage, simg, s.Digest); err != nil {
			return err
		}
	}
	return nil
}

// samePlatform compares an entry's platform with its source's, "erofs" in
// the converted one's os.features aside.
func samePlatform(p, s *v1.Platform) bool {
	if p == nil || s == nil {
		return p == nil && s == nil
	}
	pc := *p
	if !slices.Contains(s.OSFeatures, "erofs") {
		pc.OSFeatures = slices.DeleteFunc(slices.Clone(pc.OSFeatures), func(f string) bool { return f == "erofs" })
	}
	return pc.Equals(*s)
}

// image checks one converted image against its source.
func (c *checker) image(where string, img, src v1.Image, srcDigest v1.Hash) error {
	c.res.Images++
	p, err := c.readPair(where, img, src, srcDigest)
	if err != nil {
		return err
	}
	m, sm, rawCfg, rawSrcCfg, cfg := p.m, p.sm, p.rawCfg, p.rawSrcCfg, p.cfg
	if len(cfg.RootFS.DiffIDs) == len(m.Layers) {
		// The spec's standalone chunk-index layers index the layer
		// before them; the rest is compared with the source.
		mm := *m
		if mm.Layers, cfg.RootFS.DiffIDs, err = c.splitChunkIndexes(where, img, m.Layers, cfg.RootFS.DiffIDs); err != nil {
			return err
		}
		m = &mm
	}
	var chain []string
	for _, l := range sm.Layers {
		chain = append(chain, l.Digest.String())
	}
	// Flattened: one layer named after all of the source's, and, of a
	// source of one layer, the history that says so.
	flat := len(m.Layers) == 1 && m.Layers[0].Annotations[convert.AnnotationSourceLayer] == strings.Join(chain, ",") &&
		(len(sm.Layers) > 1 || len(cfg.History) == 1 && cfg.History[0].CreatedBy == convert.FlattenedBy)
	// The device layout: the source's layers as devices, and a metadata
	// layer over them, compared as a flattened layer is.
	var meta *v1.Descriptor
	var metaDiffID v1.Hash
	// The overlay-data layout: a data layer and a metadata layer, the
	// latter, read through the former, compared as a flattened layer is.
	odata := !flat && len(cfg.RootFS.DiffIDs) == len(m.Layers) && overlayDataLayout(m.Layers, strings.Join(chain, ","))
	if odata {
		flat = true
		meta, metaDiffID = &m.Layers[1], cfg.RootFS.DiffIDs[1]
	}
	if !flat && len(cfg.RootFS.DiffIDs) == len(m.Layers) && deviceLayout(m.Layers, len(sm.Layers)) {
		n := len(sm.Layers)
		meta, metaDiffID = &m.Layers[n], cfg.RootFS.DiffIDs[n]
		mm := *m
		mm.Layers, cfg.RootFS.DiffIDs = m.Layers[:n], cfg.RootFS.DiffIDs[:n]
		m = &mm
	}
	c.config(where, rawCfg, rawSrcCfg, flat, meta != nil && !odata)
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		c.diff(where, "%d layers but %d diff_ids", len(m.Layers), len(cfg.RootFS.DiffIDs))
		return nil
	}
	if !flat && len(m.Layers) != len(sm.Layers) {
		c.diff(where, "%d layers, the source %d", len(m.Layers), len(sm.Layers))
		return nil
	}

	// Directories no layer declares get fstree's mtime, not the
	// converter's: the comparisons leave it out.
	stack := fstree.NewStack(time.Time{})
	for i, sd := range sm.Layers {
		at := fmt.Sprintf("%s: layer %d", where, i+1)
		if convert.PassedThrough(sd.MediaType) {
			// Not a tar: convert takes it as it is. It is not read,
			// and the layers above see nothing of it.
			if !flat {
				c.res.Layers++
				if m.Layers[i].Digest != sd.Digest {
					c.diff(at, "%s layer %s, not the source's %s, which is kept as it is", m.Layers[i].MediaType, m.Layers[i].Digest, sd.Digest)
				}
			}
			continue
		}
		own, ownErr, err := c.sourceLayer(src, sd, stack)
		if err != nil {
			return fmt.Errorf("%s: source layer %s: %w", at, sd.Digest, err)
		}
		if flat {
			continue
		}
		if ownErr != nil {
			c.diff(at, "converted, but its source layer %s is no layer on its own: %v", sd.Digest, ownErr)
			continue
		}
		if err := c.layer(at, img, m.Layers[i], cfg.RootFS.DiffIDs[i], sd, own, i == 0); err != nil {
			return err
		}
	}
	if odata {
		return c.overlayDataMeta(where, img, m.Layers[0], *meta, cfg.RootFS.DiffIDs[0], metaDiffID, stack.Tree())
	}
	if flat {
		return c.layer(where+": flattened layer", img, m.Layers[0], cfg.RootFS.DiffIDs[0], v1.Descriptor{}, stack.Tree(), false)
	}
	if meta != nil {
		return c.deviceMeta(where+": metadata layer", img, *meta, metaDiffID, m.Layers, stack.Tree())
	}
	return nil
}

// pair is a converted image's manifest and config, and its source's.
type pair struct {
	m, sm             *v1.Manifest
	rawCfg, rawSrcCfg []byte
	cfg               *v1.ConfigFile
}

// readPair reads the manifests and configs of a converted image and its
// source, and checks that the image names that source.
func (c *checker) readPair(where string, img, src v1.Image, srcDigest v1.Hash) (*pair, error) {
	var p pair
	var err error
	if p.m, err = img.Manifest(); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	if p.sm, err = src.Manifest(); err != nil {
		return nil, fmt.Errorf("%s: source: %w", where, err)
	}
	s, has := p.m.Annotations[convert.AnnotationSourceManifest]
	c.bySubject = !has && p.m.Subject != nil && p.m.Subject.Digest == srcDigest
	if s != srcDigest.String() && !c.bySubject {
		c.diff(where, "names its source %q, not %s", s, srcDigest)
	}
	if err := convert.CheckConfigSize(p.m.Config); err != nil {
		return nil, fmt.Errorf("%s: config: %w", where, err)
	}
	if err := convert.CheckConfigSize(p.sm.Config); err != nil {
		return nil, fmt.Errorf("%s: source config: %w", where, err)
	}
	if p.rawCfg, err = img.RawConfigFile(); err != nil {
		return nil, fmt.Errorf("%s: config: %w", where, err)
	}
	if p.rawSrcCfg, err = src.RawConfigFile(); err != nil {
		return nil, fmt.Errorf("%s: source config: %w", where, err)
	}
	if p.cfg, err = v1.ParseConfigFile(bytes.NewReader(p.rawCfg)); err != nil {
		return nil, fmt.Errorf("%s: config: %w", where, err)
	}
	return &p, nil
}

// sourceLayer reads a source layer onto stack and returns its own tree
// (fstree.Stack.Layer).
func (c *checker) sourceLayer(src v1.Image, d v1.Descriptor, stack *fstree.Stack) (own *fstree.Tree, ownErr, err error) {
	l, err := src.LayerByDigest(d.Digest)
	if err != nil {
		return nil, nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	tar, _, err := convert.Decompress(oci.ContextReader(c.ctx, rc))
	if err != nil {
		return nil, nil, err
	}
	defer tar.Close()
	return stack.Layer(c.capped(tar))
}

// capped bounds r by MaxLayerSize, if set.
func (c *checker) capped(r io.Reader) io.Reader {
	if c.opt.MaxLayerSize <= 0 {
		return r
	}
	return convert.CapReader(r, c.opt.MaxLayerSize)
}

// layer checks one converted layer d against want, the tree of its source
// layer sd ("" digest: flattened) as the layers below it leave it. The
// bottom layer of an image in the spec's media types has no whiteouts or
// opaque markers (stripMarkers): want's are not looked for.
func (c *checker) layer(where string, img v1.Image, d v1.Descriptor, diffID v1.Hash, sd v1.Descriptor, want *fstree.Tree, bottom bool, devs ...erofs.OpenOption) error {
	c.res.Layers++
	if !convert.IsEROFS(d.MediaType) {
		c.diff(where, "%s layer %s, not EROFS", d.MediaType, d.Digest)
		return nil
	}
	if a, has := d.Annotations[convert.AnnotationSourceLayer]; sd.Digest.Hex != "" && a != sd.Digest.String() && (has || !c.bySubject) {
		c.diff(where, "names its source layer %q, not %s", d.Annotations[convert.AnnotationSourceLayer], sd.Digest)
	}
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	f, size, raw, comp, err := c.spool(l)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", where, d.Digest, err)
	}
	defer f.Close()
	if want := layerCompression(d.MediaType); comp != want {
		c.diff(where, "a %s blob, but its media type %s says %s", comp, d.MediaType, want)
	}
	if raw != diffID {
		c.diff(where, "the raw image's digest is %s, the config's diff_id %s", raw, diffID)
	}
	if u := d.Annotations[convert.AnnotationUncompressed]; u != "" && u != raw.String() {
		c.diff(where, "the raw image's digest is %s, its %s %s", raw, convert.AnnotationUncompressed, u)
	}
	ei, err := erofs.Open(f, size, devs...)
	if err != nil {
		c.diff(where, "not an EROFS image: %v", err)
		return nil
	}
	if !ei.Super().ChecksumOK {
		c.diff(where, "the superblock's checksum does not match it (the kernel refuses to mount it)")
	}
	got, err := fstree.FromImage(ei)
	if err != nil {
		c.diff(where, "reading the EROFS image: %v", err)
		return nil
	}
	if c.redirects != nil {
		c.resolveRedirects(where, got)
	}
	if err := c.specLayer(where, l, d, f, size); err != nil {
		return err
	}
	c.res.Paths += got.Len()
	opt := fstree.DiffOptions{IgnoreImpliedMtime: true, IgnoreWhiteoutPerm: true, Want: "source", Got: "converted"}
	if bottom && (d.MediaType == convert.MediaTypeSpec || d.MediaType == convert.MediaTypeSpecZstd) {
		opt.Ignore = func(p, field string) bool {
			n := want.Node(p)
			switch {
			case n == nil:
				return false
			case field == "missing":
				return n.Type() == erofs.S_IFCHR && n.Devmajor == 0 && n.Devminor == 0
			}
			return n.IsDir() && (field == "xattr:"+whiteout.OpaqueXattr || field == "xattr:"+whiteout.OriginXattr)
		}
	}
	for _, s := range fstree.Diff(want, got, opt) {
		c.diff(where, "%s", s)
	}
	return nil
}

// spool copies a converted layer's raw EROFS image (decompressed, for a
// zstd layer) into a file of TempDir that is removed at once, for the
// reader's random access, and returns it with its size and digest.
func (c *checker) spool(l v1.Layer) (*os.File, int64, v1.Hash, convert.Compression, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, 0, v1.Hash{}, "", err
	}
	defer rc.Close()
	dec, comp, err := convert.Decompress(oci.ContextReader(c.ctx, rc))
	if err != nil {
		return nil, 0, v1.Hash{}, "", err
	}
	defer dec.Close()
	f, err := atomicfile.Unnamed(c.opt.TempDir, "ocierofs-check-*.erofs")
	if err != nil {
		return nil, 0, v1.Hash{}, "", err
	}
	h := sha256.New()
	var raw io.Reader = dec
	if comp != convert.Uncompressed {
		raw = c.capped(dec)
	}
	n, err := io.Copy(io.MultiWriter(f, h), raw)
	if err != nil {
		f.Close()
		if errors.As(err, new(*convert.TooLargeError)) {
			err = fmt.Errorf("the raw EROFS image in the %s blob is larger than the %d bytes a layer may have", comp, c.opt.MaxLayerSize)
		}
		return nil, 0, v1.Hash{}, "", err
	}
	return f, n, v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", h.Sum(nil))}, comp, nil
}

// layerCompression is the compression an EROFS layer's media type gives
// its blob.
func layerCompression(mt types.MediaType) convert.Compression {
	if mt == convert.MediaTypeLayerZstd || mt == convert.MediaTypeSpecZstd {
		return convert.Zstd
	}
	return convert.Uncompressed
}

// config compares the converted config with the source's but for what
// conversion changes: rootfs.diff_ids, "erofs" added to os.features and,
// flattened, the history, or, in the device layout, the metadata layer's
// entry added to it.
func (c *checker) config(where string, raw, src []byte, flat, device bool) {
	var got, want map[string]any
	if err := unmarshalNumbers(raw, &got); err != nil {
		c.diff(where, "config: %v", err)
		return
	}
	if err := unmarshalNumbers(src, &want); err != nil {
		c.diff(where, "source config: %v", err)
		return
	}
	feats, _ := got["os.features"].([]any)
	if !slices.Contains(feats, any("erofs")) {
		c.diff(where, "config: os.features %v has no \"erofs\"", feats)
	}
	srcFeats, _ := want["os.features"].([]any)
	if !slices.Contains(srcFeats, any("erofs")) {
		feats = slices.DeleteFunc(slices.Clone(feats), func(f any) bool { return f == "erofs" })
	}
	if len(feats) > 0 || len(srcFeats) > 0 {
		got["os.features"], want["os.features"] = feats, srcFeats
	} else {
		delete(got, "os.features")
		delete(want, "os.features")
	}
	// A conversion in the spec's media types sets rootfs.type "layers"
	// (§5.1), whatever the source's said.
	if r, ok := got["rootfs"].(map[string]any); ok && r["type"] == "layers" {
		if sr, ok := want["rootfs"].(map[string]any); ok {
			sr["type"] = "layers"
		}
	}
	if h, ok := got["history"].([]any); ok && device && len(h) > 0 {
		if e, _ := h[len(h)-1].(map[string]any); e["created_by"] == convert.DeviceMetaBy {
			got["history"] = h[:len(h)-1]
			if _, has := want["history"]; !has && len(h) == 1 {
				delete(got, "history")
			}
		}
	}
	for _, cfg := range []map[string]any{got, want} {
		if r, ok := cfg["rootfs"].(map[string]any); ok {
			delete(r, "diff_ids")
		}
		if flat {
			delete(cfg, "history")
		}
	}
	keys := map[string]bool{}
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if !reflect.DeepEqual(got[k], want[k]) {
			g, _ := json.Marshal(got[k])
			w, _ := json.Marshal(want[k])
			c.diff(where, "config: %s: source %s, converted %s", k, w, g)
		}
	}
}

func unmarshalNumbers(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	return dec.Decode(v)
}
