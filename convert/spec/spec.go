// Package spec checks an image, or an index, against the EROFS image layer
// specification (github.com/erofs/erofs-image-spec, spec.md): the media
// types, annotations and roles of §2, the layer rules of §3 (whiteouts,
// ordering), the manifest of §4, the config of §5 and the index of §6.
// It takes any image, whichever tool made it, and needs no source.
//
// Each rule names the section that states it; one function per section
// (section2_3, section3_6, …) gathers that section's rules. A Violation
// of a MUST makes an image non-conformant; one of a SHOULD is reported as
// such. With Options.Contents the layers are read too: a +zstd layer is
// decompressed (its digest against org.erofs.uncompressed-digest and
// rootfs.diff_ids), every EROFS layer opened as an image, and each
// overlay layer walked for whiteouts and .wh. names (§3.6).
//
// With Contents, a chunk index (§3.4) is read with oci/chunkindex and its
// chunks checked, and a dm-verity tree (§3.5) verified where its
// parameters are the ones ocierofs reads. What is not checked: hard links
// across layers (§3.7: an image cannot show one, its producer decides),
// and reproducibility (§8.3: a property of the producer).
package spec

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Media types of the specification (§2.1, §2.2).
const (
	MediaTypeErofs      types.MediaType = "application/vnd.erofs"
	MediaTypeErofsZstd  types.MediaType = "application/vnd.erofs+zstd"
	MediaTypeChunkIndex types.MediaType = "application/vnd.erofs.chunk-index.v1"
)

// Annotations of the specification (§2.3).
const (
	AnnotationChunkRange     = "org.erofs.chunk-index.range"
	AnnotationChunkDigest    = "org.erofs.chunk-index.digest"
	AnnotationChunkMediaType = "org.erofs.chunk-index.mediaType"
	AnnotationChunkTarget    = "org.erofs.chunk-index.target"
	AnnotationUncompressed   = "org.erofs.uncompressed-digest"
	AnnotationHashOffset     = "org.erofs.dmverity.hash_offset"
	AnnotationRootDigest     = "org.erofs.dmverity.root_digest"
	AnnotationBlockSize      = "org.erofs.dmverity.block_size"
	AnnotationRole           = "org.erofs.role"
)

// Roles (§2.4).
const (
	RoleDevice       = "device"
	RoleOverlayLower = "overlay-lower"
	RoleOverlayData  = "overlay-data"
)

// OSFeature is the os.features value of an EROFS-bearing image (§5.4).
const OSFeature = "erofs"

// IsErofs reports the media types of an EROFS filesystem image (§2.1).
func IsErofs(mt types.MediaType) bool { return mt == MediaTypeErofs || mt == MediaTypeErofsZstd }

// Level is the strength of a requirement (RFC 2119).
type Level string

const (
	Must   Level = "MUST"
	Should Level = "SHOULD"
)

// A Violation is one requirement an image breaks.
type Violation struct {
	Section string // "3.6"
	Level   Level
	Where   string // "layer 2", "config", "index entry 1"; "" for the manifest
	Msg     string
}

func (v Violation) String() string {
	s := "§" + v.Section + ": "
	if v.Where != "" {
		s += v.Where + ": "
	}
	s += v.Msg
	if v.Level == Should {
		s += " (SHOULD)"
	}
	return s
}

// Options control a check.
type Options struct {
	// Contents reads the layers' bytes, not only manifests and config.
	Contents bool
	// TempDir holds one layer at a time while it is read (default
	// $TMPDIR).
	TempDir string
	// MaxLayerSize, if positive, bounds the bytes of each layer (a +zstd
	// layer's decompressed ones) that Contents reads.
	MaxLayerSize int64
}

// Conformant reports whether vs holds no violated MUST.
func Conformant(vs []Violation) bool {
	return !slices.ContainsFunc(vs, func(v Violation) bool { return v.Level == Must })
}

// checker gathers the violations of one image.
type checker struct {
	ctx context.Context
	opt Options
	out []Violation
	pre string // prefixed to Where: the index entry an image is checked as
}

func (c *checker) add(sec string, l Level, where, format string, args ...any) {
	if c.pre != "" {
		if where == "" {
			where = c.pre
		} else {
			where = c.pre + ": " + where
		}
	}
	c.out = append(c.out, Violation{Section: sec, Level: l, Where: where, Msg: fmt.Sprintf(format, args...)})
}

// image is what the section functions look at: the manifest, the config
// (as JSON fields, to tell an absent field from an empty one) and, with
// Contents, what reading each layer found.
type image struct {
	img      v1.Image
	m        *v1.Manifest
	cfg      map[string]json.RawMessage
	contents []*layerContents // by layer; nil entries where not read
}

// CheckImage checks one image.
func CheckImage(ctx context.Context, img v1.Image, opt Options) ([]Violation, error) {
	c := &checker{ctx: ctx, opt: opt}
	if err := c.image(img); err != nil {
		return nil, err
	}
	return c.out, nil
}

func (c *checker) image(img v1.Image) error {
	m, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	raw, err := img.RawConfigFile()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	im := &image{img: img, m: m}
	if err := json.Unmarshal(raw, &im.cfg); err != nil {
		return fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	if c.opt.Contents {
		im.contents = make([]*layerContents, len(m.Layers))
		for i, d := range m.Layers {
			if !IsErofs(d.MediaType) {
				continue
			}
			var next *v1.Descriptor
			if i+1 < len(m.Layers) && m.Layers[i+1].MediaType == MediaTypeChunkIndex {
				next = &m.Layers[i+1]
			}
			lc, err := c.readLayer(img, d, next)
			if err != nil {
				return fmt.Errorf("layer %d (%s): %w", i, d.Digest, err)
			}
			im.contents[i] = lc
		}
	}
	c.section2_3(im)
	c.section2_4(im)
	c.section2_4Data(im)
	c.section3_2(im)
	c.section3_4(im)
	c.section3_5(im)
	c.section3_6(im)
	c.section3_8(im)
	c.section4(im)
	c.section5_2(im)
	c.section5_4(im)
	return nil
}

// CheckIndex checks an index (§6) and each image it holds, nested indexes
// too. Entries that are no images (artifacts, attestations) are passed
// over; tar-bearing images are checked only as entries of the index.
func CheckIndex(ctx context.Context, idx v1.ImageIndex, opt Options) ([]Violation, error) {
	c := &checker{ctx: ctx, opt: opt}
	if err := c.index(idx, "", 0); err != nil {
		return nil, err
	}
	return c.out, nil
}

// maxDepth bounds the nesting of indexes.
const maxDepth = 4

func (c *checker) index(idx v1.ImageIndex, where string, depth int) error {
	im, err := idx.IndexManifest()
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	entries := make([]indexEntry, len(im.Manifests))
	for i, d := range im.Manifests {
		at := fmt.Sprintf("%sindex entry %d", where, i)
		entries[i].desc = d
		switch {
		case d.MediaType.IsIndex():
			if depth == maxDepth {
				return fmt.Errorf("%s: indexes nested more than %d deep", at, maxDepth)
			}
			sub, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
			if err := c.index(sub, at+": ", depth+1); err != nil {
				return err
			}
		case d.MediaType.IsImage():
			img, err := idx.Image(d.Digest)
			if err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
			m, err := img.Manifest()
			if err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
			entries[i].erofs = bearsErofs(m)
			if !entries[i].erofs {
				continue
			}
			c.pre = at
			err = c.image(img)
			c.pre = ""
			if err != nil {
				return fmt.Errorf("%s: %w", at, err)
			}
		}
	}
	c.section6(where, entries)
	return nil
}

type indexEntry struct {
	desc  v1.Descriptor
	erofs bool // an image whose layers are EROFS
}

// bearsErofs reports a manifest with EROFS layers (§2.1, §2.2): what the
// specification calls an EROFS-bearing manifest.
func bearsErofs(m *v1.Manifest) bool {
	return slices.ContainsFunc(m.Layers, func(d v1.Descriptor) bool {
		return IsErofs(d.MediaType) || d.MediaType == MediaTypeChunkIndex
	})
}

// The grammar of §2.3's typed values. A digest is the OCI descriptor
// grammar's; a media type is RFC 6838's restricted-name.
var (
	reRange     = regexp.MustCompile(`^[0-9]+(:[0-9]+)?$`)
	reUint      = regexp.MustCompile(`^[0-9]+$`)
	reDigest    = regexp.MustCompile(`^[a-z0-9]+(?:[+._-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$`)
	reMediaType = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$`)
)

// validDigest is the descriptor grammar, and for the algorithms the OCI
// registers, the encoded part's form.
func validDigest(s string) bool {
	if !reDigest.MatchString(s) {
		return false
	}
	alg, enc, _ := bytes.Cut([]byte(s), []byte(":"))
	want := map[string]int{"sha256": 64, "sha512": 128}[string(alg)]
	if want == 0 {
		return true
	}
	return len(enc) == want && regexp.MustCompile(`^[a-f0-9]+$`).Match(enc)
}

// parseUint reads a uint annotation; ok false where it is not one.
func parseUint(s string) (uint64, bool) {
	if !reUint.MatchString(s) {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// section2_3: the annotations' grammar, and those one requires of another.
func (c *checker) section2_3(im *image) {
	for i, d := range im.m.Layers {
		where := fmt.Sprintf("layer %d", i)
		a := d.Annotations
		check := func(key string, ok func(string) bool, what string) {
			if v, has := a[key]; has && !ok(v) {
				c.add("2.3", Must, where, "%s %q is not a %s", key, v, what)
			}
		}
		check(AnnotationChunkRange, func(v string) bool {
			if !reRange.MatchString(v) {
				return false
			}
			off, end, hasEnd := bytes.Cut([]byte(v), []byte(":"))
			o, ok1 := parseUint(string(off))
			if !hasEnd {
				return ok1
			}
			e, ok2 := parseUint(string(end))
			return ok1 && ok2 && e > o
		}, "range (offset[:end], end past offset)")
		check(AnnotationChunkDigest, validDigest, "digest")
		check(AnnotationChunkTarget, validDigest, "digest")
		check(AnnotationUncompressed, validDigest, "digest")
		check(AnnotationRootDigest, validDigest, "digest")
		check(AnnotationChunkMediaType, reMediaType.MatchString, "media type")
		check(AnnotationHashOffset, func(v string) bool { _, ok := parseUint(v); return ok }, "uint")
		check(AnnotationBlockSize, func(v string) bool { n, ok := parseUint(v); return ok && n > 0 }, "uint above 0")
		check(AnnotationRole, func(v string) bool {
			return v == RoleDevice || v == RoleOverlayLower || v == RoleOverlayData
		}, "role (device, overlay-lower, overlay-data)")

		_, hasOff := a[AnnotationHashOffset]
		_, hasRoot := a[AnnotationRootDigest]
		switch {
		case hasOff && !hasRoot:
			c.add("2.3", Must, where, "%s without %s", AnnotationHashOffset, AnnotationRootDigest)
		case hasRoot && !hasOff:
			c.add("2.3", Must, where, "%s without %s", AnnotationRootDigest, AnnotationHashOffset)
		}
		if _, has := a[AnnotationBlockSize]; has && !hasOff {
			c.add("2.3", Must, where, "%s without %s", AnnotationBlockSize, AnnotationHashOffset)
		}
		if off, ok := parseUint(a[AnnotationHashOffset]); ok {
			bs := uint64(4096)
			if v, has := a[AnnotationBlockSize]; has {
				bs, ok = parseUint(v)
			}
			if ok && bs > 0 && off%bs != 0 {
				c.add("2.3", Must, where, "%s %d not a multiple of block_size %d", AnnotationHashOffset, off, bs)
			}
		}
		if _, has := a[AnnotationChunkRange]; has && !IsErofs(d.MediaType) {
			c.add("2.3", Must, where, "%s on a %s layer: an embedded chunk index is in an EROFS layer", AnnotationChunkRange, d.MediaType)
		}
		if _, has := a[AnnotationChunkRange]; has {
			if _, dg := a[AnnotationChunkDigest]; !dg {
				c.add("2.3", Should, where, "an embedded chunk index without %s", AnnotationChunkDigest)
			}
		}
		if d.MediaType == MediaTypeErofs {
			if u, has := a[AnnotationUncompressed]; has && u != d.Digest.String() {
				c.add("2.3", Must, where, "%s %s of a raw layer is not its digest %s", AnnotationUncompressed, u, d.Digest)
			}
		}
	}
}

// section2_4: roles, their media types, and the layers that consume them.
func (c *checker) section2_4(im *image) {
	ls := im.m.Layers
	for i, d := range ls {
		where := fmt.Sprintf("layer %d", i)
		role := d.Annotations[AnnotationRole]
		switch role {
		case RoleOverlayLower, RoleOverlayData:
			if !IsErofs(d.MediaType) {
				c.add("2.4", Must, where, "role %s on a %s layer: it is for application/vnd.erofs[+zstd]", role, d.MediaType)
			}
		}
		switch role {
		case RoleDevice:
			if !slices.ContainsFunc(ls[i+1:], func(n v1.Descriptor) bool {
				return IsErofs(n.MediaType) && n.Annotations[AnnotationRole] != RoleDevice
			}) {
				c.add("2.4", Must, where, "a device layer that no non-device EROFS layer above it consumes")
			}
		case RoleOverlayData:
			if !slices.ContainsFunc(ls[i+1:], func(n v1.Descriptor) bool {
				r := n.Annotations[AnnotationRole]
				return IsErofs(n.MediaType) && r != RoleDevice && r != RoleOverlayData
			}) {
				c.add("2.4", Must, where, "an overlay-data layer that no EROFS metadata layer above it consumes")
			}
		}
	}
}

// section2_4Data: with Contents, each overlay-data layer's consumer (the
// first EROFS layer above it neither device nor overlay-data, §3.8 rule
// 3) refers to its payloads: each metacopy file of the consumer redirects
// to a file of the overlay-data layers it consumes (of the file's size:
// SHOULD). Whether the consumer refers to them at all is not checked: an
// image without file data has nothing to refer to.
func (c *checker) section2_4Data(im *image) {
	if im.contents == nil {
		return
	}
	var data []int // the overlay-data layers waiting for their consumer
	for i, d := range im.m.Layers {
		switch r := d.Annotations[AnnotationRole]; {
		case !IsErofs(d.MediaType) || r == RoleDevice:
		case r == RoleOverlayData:
			data = append(data, i)
		case len(data) > 0:
			c.consumer(im, i, data)
			data = nil
		}
	}
}

// consumer checks the metacopy files of layer i against the payloads of
// the overlay-data layers data.
func (c *checker) consumer(im *image, i int, data []int) {
	lc := im.contents[i]
	if lc == nil || lc.openErr != nil {
		return
	}
	where := fmt.Sprintf("layer %d", i)
	find := func(target string) (int64, bool) {
		for _, j := range data {
			if dc := im.contents[j]; dc != nil && dc.payloads != nil {
				if n, ok := dc.payloads[target]; ok {
					return n, true
				}
			}
		}
		return 0, false
	}
	for _, r := range lc.redirects {
		switch n, ok := find(r.target); {
		case !strings.HasPrefix(r.target, "/"):
			c.add("2.4", Must, where, "metacopy file %s: redirect %q is no absolute path into the overlay-data layers below it", r.path, r.target)
		case !ok:
			c.add("2.4", Must, where, "metacopy file %s: redirect %s is no file of the overlay-data layers below it", r.path, r.target)
		case n != r.size:
			c.add("2.4", Should, where, "metacopy file %s: %d bytes, its data %s %d", r.path, r.size, r.target, n)
		}
	}
}

// section3_2: every EROFS layer is an EROFS image (§3.2, §3.3; §7's
// constraints).
func (c *checker) section3_2(im *image) {
	for i, lc := range im.contents {
		if lc != nil && lc.openErr != nil {
			c.add("3.2", Must, fmt.Sprintf("layer %d", i), "not an EROFS image: %v", lc.openErr)
		}
	}
}

// section3_4: standalone chunk-index layers and what they index (§3.4.3);
// with Contents, each chunk index read (oci/chunkindex: header, entries,
// digest, the CompressionType of its layer) and every chunk checked
// against its checksum and the image data.
func (c *checker) section3_4(im *image) {
	for i, lc := range im.contents {
		if lc != nil && lc.chunk != "" {
			c.add("3.4", Must, fmt.Sprintf("layer %d", i), "%s", lc.chunk)
		}
		if lc != nil && lc.chunkNoSums {
			c.add("3.4.5", Should, fmt.Sprintf("layer %d", i), "a chunk index without per-chunk checksums")
		}
	}
	ls := im.m.Layers
	for i, d := range ls {
		where := fmt.Sprintf("layer %d", i)
		if d.MediaType != MediaTypeChunkIndex {
			continue
		}
		if i == 0 {
			continue // §3.8 says it
		}
		t, has := d.Annotations[AnnotationChunkTarget]
		switch {
		case !has:
			c.add("3.4.3", Should, where, "a standalone chunk index without %s", AnnotationChunkTarget)
		case t != ls[i-1].Digest.String():
			c.add("3.4.3", Must, where, "%s %s is not the layer below it, %s", AnnotationChunkTarget, t, ls[i-1].Digest)
		}
		if _, emb := ls[i-1].Annotations[AnnotationChunkRange]; emb {
			c.add("3.4.3", Should, where, "a standalone chunk index for layer %d, which has one embedded", i-1)
		}
	}
}

// section3_5: with Contents, the dm-verity tree at hash_offset: after the
// whole EROFS image, inside the image data, and, where its superblock has
// the parameters ocierofs reads (SHA-256, 4 KiB hash blocks, the zero
// salt of containerd), every hash block and the root digest as annotated.
func (c *checker) section3_5(im *image) {
	for i, lc := range im.contents {
		if lc != nil && lc.verity != "" {
			c.add("3.5", Must, fmt.Sprintf("layer %d", i), "%s", lc.verity)
		}
	}
}

// section3_6: whiteouts only above an overlay-lower layer, and no .wh.
// names in any EROFS layer (needs Contents).
func (c *checker) section3_6(im *image) {
	lowerBelow := false
	for i, lc := range im.contents {
		d := im.m.Layers[i]
		role := d.Annotations[AnnotationRole]
		where := fmt.Sprintf("layer %d", i)
		if lc != nil && lc.openErr == nil {
			if lc.dotWh != "" {
				c.add("3.6", Must, where, ".wh. name %s", lc.dotWh)
			}
			// A device or overlay-data layer's whiteouts are ignored.
			if role != RoleDevice && role != RoleOverlayData && !lowerBelow {
				if lc.whiteout != "" {
					c.add("3.6", Must, where, "whiteout %s with no overlay-lower layer below", lc.whiteout)
				}
				if lc.opaque != "" {
					c.add("3.6", Should, where, "opaque directory %s with no overlay-lower layer below", lc.opaque)
				}
			}
		}
		if role == RoleOverlayLower {
			lowerBelow = true
		}
	}
}

// section3_8: the last layer is mountable; a chunk index is neither first
// nor last.
func (c *checker) section3_8(im *image) {
	ls := im.m.Layers
	if len(ls) == 0 {
		c.add("3.8", Must, "", "no layers: the last layer must be a mountable EROFS layer")
		return
	}
	last := ls[len(ls)-1]
	switch role := last.Annotations[AnnotationRole]; {
	case last.MediaType == MediaTypeChunkIndex:
		c.add("3.8", Must, fmt.Sprintf("layer %d", len(ls)-1), "last layer is a chunk index")
	case !IsErofs(last.MediaType):
		c.add("3.8", Must, fmt.Sprintf("layer %d", len(ls)-1), "last layer is %s, not a mountable EROFS layer", last.MediaType)
	case role == RoleDevice || role == RoleOverlayData:
		c.add("3.8", Must, fmt.Sprintf("layer %d", len(ls)-1), "last layer has role %s", role)
	}
	if len(ls) > 1 && ls[0].MediaType == MediaTypeChunkIndex {
		c.add("3.8", Must, "layer 0", "first layer is a chunk index")
	}
}

// section4: each layer's media type is the specification's, or any for a
// device; one family of media types.
func (c *checker) section4(im *image) {
	erofsLayers, tarLayers := 0, 0
	for i, d := range im.m.Layers {
		switch {
		case IsErofs(d.MediaType) || d.MediaType == MediaTypeChunkIndex:
			erofsLayers++
		case d.Annotations[AnnotationRole] == RoleDevice:
		default:
			c.add("4", Must, fmt.Sprintf("layer %d", i), "media type %s is none of §2.1, §2.2, and the layer is no device", d.MediaType)
			if d.MediaType.IsLayer() {
				tarLayers++
			}
		}
	}
	if erofsLayers > 0 && tarLayers > 0 {
		c.add("4", Should, "", "EROFS and tar layers in one manifest")
	}
}

// section5_2: rootfs and the per-layer uncompressed digests (§5.1, §5.2).
func (c *checker) section5_2(im *image) {
	var rootfs struct {
		Type    *string  `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	}
	rawRootfs, hasRootfs := im.cfg["rootfs"]
	hasDiffIDs := false
	if hasRootfs {
		var fields map[string]json.RawMessage
		if json.Unmarshal(rawRootfs, &fields) != nil || json.Unmarshal(rawRootfs, &rootfs) != nil {
			c.add("5.1", Must, "config", "rootfs is not an object of type and diff_ids")
			return
		}
		_, hasDiffIDs = fields["diff_ids"]
		if rootfs.Type == nil || *rootfs.Type != "layers" {
			t := "none"
			if rootfs.Type != nil {
				t = strconv.Quote(*rootfs.Type)
			}
			c.add("5.1", Must, "config", "rootfs.type %s, not \"layers\"", t)
		}
	}
	ls := im.m.Layers
	missing := -1 // a compressed layer without the annotation
	for i, d := range ls {
		if _, has := d.Annotations[AnnotationUncompressed]; !has && d.MediaType == MediaTypeErofsZstd {
			c.add("5.2", Should, fmt.Sprintf("layer %d", i), "+zstd layer without %s", AnnotationUncompressed)
			if missing < 0 {
				missing = i
			}
		}
	}
	switch {
	case !hasDiffIDs && missing >= 0:
		c.add("5.2", Must, "config", "no rootfs.diff_ids, and layer %d has no %s", missing, AnnotationUncompressed)
	case hasDiffIDs && len(rootfs.DiffIDs) != len(ls):
		c.add("5.2", Must, "config", "%d rootfs.diff_ids for %d layers", len(rootfs.DiffIDs), len(ls))
	case !hasDiffIDs:
		c.add("5.2", Should, "config", "no rootfs.diff_ids (for consumers that do not read %s)", AnnotationUncompressed)
	}
	for i, d := range ls {
		where := fmt.Sprintf("layer %d", i)
		ann, hasAnn := d.Annotations[AnnotationUncompressed]
		diffID := ""
		if hasDiffIDs && i < len(rootfs.DiffIDs) {
			diffID = rootfs.DiffIDs[i]
		}
		// The digest the layer's bytes give (§5.2's DiffID definition).
		var got string
		switch {
		case d.MediaType == MediaTypeErofs || d.MediaType == MediaTypeChunkIndex:
			got = d.Digest.String()
		case im.contents != nil && im.contents[i] != nil:
			got = im.contents[i].diffID
		}
		if got == "" {
			if hasAnn && diffID != "" && ann != diffID && IsErofs(d.MediaType) {
				c.add("5.2", Must, where, "%s %s but rootfs.diff_ids has %s", AnnotationUncompressed, ann, diffID)
			}
			continue
		}
		if hasAnn && ann != got {
			c.add("5.2", Must, where, "%s %s, but the layer's uncompressed data is %s", AnnotationUncompressed, ann, got)
		}
		if diffID != "" && diffID != got && (IsErofs(d.MediaType) || d.MediaType == MediaTypeChunkIndex) {
			c.add("5.2", Must, where, "rootfs.diff_ids has %s, but the layer's uncompressed data is %s", diffID, got)
		}
	}
}

// section5_4: "erofs" in the config's os.features.
func (c *checker) section5_4(im *image) {
	var feats []string
	if raw, ok := im.cfg["os.features"]; ok && json.Unmarshal(raw, &feats) != nil {
		c.add("5.4", Must, "config", "os.features is not an array of strings")
		return
	}
	if !slices.Contains(feats, OSFeature) {
		c.add("5.4", Must, "config", "config os.features lacks erofs")
	}
}

// section6: "erofs" in the platform of each entry of an EROFS-bearing
// image; a tar-bearing image of the same platform listed first.
func (c *checker) section6(where string, es []indexEntry) {
	for i, e := range es {
		at := fmt.Sprintf("%sindex entry %d", where, i)
		if !e.erofs {
			continue
		}
		if e.desc.Platform == nil || !slices.Contains(e.desc.Platform.OSFeatures, OSFeature) {
			c.add("6", Must, at, "platform os.features lacks erofs")
		}
		for j := i + 1; j < len(es); j++ {
			o := es[j]
			if o.erofs || !o.desc.MediaType.IsImage() || !samePlatform(e.desc.Platform, o.desc.Platform) {
				continue
			}
			c.add("6", Should, at, "an EROFS image listed before index entry %d, the tar image of its platform", j)
		}
	}
}

// samePlatform compares two entries' platforms, "erofs" aside.
func samePlatform(a, b *v1.Platform) bool {
	if a == nil || b == nil {
		return false
	}
	strip := func(p v1.Platform) v1.Platform {
		p.OSFeatures = slices.DeleteFunc(slices.Clone(p.OSFeatures), func(f string) bool { return f == OSFeature })
		return p
	}
	return strip(*a).Equals(strip(*b))
}
