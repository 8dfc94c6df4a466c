package convert_test

// Producer conformance to the EROFS image layer spec (§8.1, §8.3) of
// convert with SpecMediaTypes: each converted image passes every rule of
// the spec package, SHOULDs included, and mounts as the same tree as the
// conversion to containerd's media types. docs/spec.md maps each
// requirement to the test here that shows it.

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/check"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/spec"
	"github.com/ocierofs/ocierofs/oci"
	"github.com/ocierofs/ocierofs/whiteout"
)

// specSource is an image whose bottom layer has whiteouts and markers
// with nothing below them: a whiteout of its own earlier file, one of a
// name nowhere, an opaque marker, a character device 0:0, a directory
// made over its own file. Its second layer has whiteouts of the first's
// files, its third an opaque directory and a hard link within itself.
func specSource(t testing.TB, arch string) v1.Image {
	return convtest.Image(t, arch,
		convtest.Layer(t, convtest.Dir(".", 0o755), convtest.Dir("etc", 0o755), convtest.File("etc/a", 0o644, []byte("a\n")), convtest.File("etc/b", 0o644, []byte("b\n")),
			convtest.File("etc/gone", 0o644, []byte("deleted in its own layer\n")), convtest.Whiteout("etc/gone"), convtest.Whiteout("nowhere"),
			convtest.Dir("var", 0o755), convtest.File("var/kept", 0o644, []byte("kept\n")), convtest.Opaque("var"),
			convtest.Node("dev0", tar.TypeChar, 0o600, 0, 0),
			convtest.File("x", 0o644, []byte("a file, then a directory\n")), convtest.Dir("x", 0o700), convtest.File("x/y", 0o644, []byte("y\n")),
			convtest.Symlink("etc/link", "a")),
		convtest.Layer(t, convtest.Whiteout("etc/b"), convtest.File("etc/c", 0o644, []byte("c\n")).Xattr("user.k", "v")),
		convtest.Layer(t, convtest.Dir("var", 0o755), convtest.Opaque("var"), convtest.File("var/new", 0o644, []byte("new\n")), convtest.Hardlink("var/new2", "var/new")),
	)
}

func specCheck(t testing.TB, img v1.Image, idx v1.ImageIndex) {
	t.Helper()
	opt := spec.Options{Contents: true, TempDir: t.TempDir()}
	var vs []spec.Violation
	var err error
	if idx != nil {
		vs, err = spec.CheckIndex(context.Background(), idx, opt)
	} else {
		vs, err = spec.CheckImage(context.Background(), img, opt)
	}
	must(t, err)
	for _, v := range vs {
		t.Errorf("spec: %s", v)
	}
}

func convertImage(t testing.TB, src v1.Image, opt convert.ImageOptions) (v1.Image, *convert.ImageReport) {
	t.Helper()
	opt.TempDir = t.TempDir()
	c, err := convert.NewConverter(opt)
	must(t, err)
	t.Cleanup(func() { c.Close() })
	img, rep, err := c.Image(context.Background(), src, convtest.SourceDescriptor(t, src))
	must(t, err)
	return img, rep
}

// TestSpecConformance: images converted with SpecMediaTypes, raw and
// +zstd, stacked and flattened, conform, SHOULDs included; mounted, they
// show what the conversion to containerd's media types shows.
func TestSpecConformance(t *testing.T) {
	src := specSource(t, "amd64")
	for _, tc := range []struct {
		name string
		opt  convert.ImageOptions
	}{
		{"raw", convert.ImageOptions{SpecMediaTypes: true}},
		{"zstd", convert.ImageOptions{SpecMediaTypes: true, LayerZstd: true}},
		{"flatten", convert.ImageOptions{SpecMediaTypes: true, Flatten: true}},
		{"standalone chunk index and dm-verity", convert.ImageOptions{SpecMediaTypes: true, LayerZstd: true,
			Spec: convert.SpecOptions{ChunkIndex: convert.ChunkIndexStandalone, ChunkSize: 4096, DMVerity: true}}},
		{"embedded chunk index", convert.ImageOptions{SpecMediaTypes: true,
			Spec: convert.SpecOptions{ChunkIndex: convert.ChunkIndexEmbedded, ChunkSize: 4096}}},
		{"embedded chunk index and dm-verity in zstd", convert.ImageOptions{SpecMediaTypes: true, LayerZstd: true,
			Spec: convert.SpecOptions{ChunkIndex: convert.ChunkIndexEmbedded, ChunkSize: 8192, DMVerity: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img, rep := convertImage(t, src, tc.opt)
			specCheck(t, img, nil)
			m, err := img.Manifest()
			must(t, err)
			// §2.4, §3.6: every EROFS layer but the top one is an
			// overlay lower; a standalone chunk index has no role.
			for i, l := range m.Layers {
				role, has := l.Annotations[spec.AnnotationRole]
				switch lower := i < len(m.Layers)-1; {
				case l.MediaType == spec.MediaTypeChunkIndex && has,
					l.MediaType != spec.MediaTypeChunkIndex && (lower && role != spec.RoleOverlayLower || !lower && has):
					t.Errorf("layer %d of %d (%s): role %q", i, len(m.Layers), l.MediaType, role)
				}
			}
			// §8.3: the same source, the same bytes.
			convertsTheSame(t, src, tc.opt, img)
			// ocierofs check finds the source's trees in it.
			if layers := checkSource(t, img, src); layers != len(m.Layers)-countType(m.Layers, spec.MediaTypeChunkIndex) {
				t.Errorf("check compared %d layers", layers)
			}
			if tc.opt.Flatten || tc.opt.Spec.ChunkIndex == convert.ChunkIndexStandalone {
				return // one layer; layers that are no images (TestSpecLayers mounts them)
			}
			if w := rep.Layers[0].Warnings; !slices.ContainsFunc(w, func(s string) bool { return strings.Contains(s, "§3.6") }) {
				t.Errorf("bottom layer's warnings %q: want the whiteouts left out", w)
			}
			// The bottom layer keeps no marker; each keeps the UUID
			// containerd derives from its tar (§8.3).
			layers := convtest.RawLayers(t, img, t.TempDir())
			checkNoWhiteouts(t, layers[0])
			cf, err := src.ConfigFile()
			must(t, err)
			for i, l := range layers {
				if got, want := openErofs(t, l).Super().UUID, convert.LayerUUID(cf.RootFS.DiffIDs[i].String()); got != want {
					t.Errorf("layer %d: UUID %x, want %x", i, got, want)
				}
			}
			// Mounted: the tree of the containerd media types' conversion.
			ctr, _ := convertImage(t, src, convert.ImageOptions{LayerZstd: tc.opt.LayerZstd})
			want := convtest.TreeFromDir(t, convtest.MountStack(t, convtest.RawLayers(t, ctr, t.TempDir())))
			got := convtest.TreeFromDir(t, convtest.MountStack(t, layers))
			convtest.ReportDiff(t, "spec vs containerd media types", diffTrees(want, got))
			if got.Node("etc/a") == nil || got.Node("etc/b") != nil || got.Node("var/new2") == nil || got.Node("var/kept") != nil {
				t.Errorf("mounted tree: %v", got.Paths())
			}
		})
	}
}

// TestSpecIndex: an index converted with SpecMediaTypes carries "erofs"
// in each entry's platform and each config (§5.4, §6), and
// NoIndexOSFeatures, which would leave the entries without it, is refused,
// and so is whiteout.Keep, which would leave .wh. names in the layers
// (§3.6).
func TestSpecIndex(t *testing.T) {
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: specSource(t, "amd64"), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: specSource(t, "arm64"), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	c, err := convert.NewConverter(convert.ImageOptions{SpecMediaTypes: true, LayerZstd: true, TempDir: t.TempDir()})
	must(t, err)
	defer c.Close()
	dg, err := idx.Digest()
	must(t, err)
	out, _, err := c.Index(context.Background(), idx, v1.Descriptor{MediaType: types.OCIImageIndex, Digest: dg})
	must(t, err)
	specCheck(t, nil, out)

	_, err = convert.NewConverter(convert.ImageOptions{SpecMediaTypes: true, NoIndexOSFeatures: true})
	if err == nil || !strings.Contains(err.Error(), "os.features") {
		t.Errorf("NoIndexOSFeatures with SpecMediaTypes: err %v", err)
	}
	_, err = convert.NewConverter(convert.ImageOptions{SpecMediaTypes: true, Layer: convert.Options{Whiteouts: whiteout.Keep}})
	if err == nil || !strings.Contains(err.Error(), "whiteouts keep") {
		t.Errorf("whiteout.Keep with SpecMediaTypes: err %v", err)
	}
}

// TestSpecRefusals: what the spec cannot carry is refused with the layer
// named: a hard link to a lower layer's file (§3.7; flattened, it is
// materialized), a layer passed through in a media type not the spec's
// (§4).
func TestSpecRefusals(t *testing.T) {
	linked := convtest.Image(t, "amd64",
		convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("f", 0o644, []byte("f\n"))),
		convtest.Layer(t, convtest.Hardlink("l", "f")))
	c, err := convert.NewConverter(convert.ImageOptions{SpecMediaTypes: true, TempDir: t.TempDir()})
	must(t, err)
	defer c.Close()
	if _, _, err := c.Image(context.Background(), linked, convtest.SourceDescriptor(t, linked)); err == nil || !strings.Contains(err.Error(), `hard link to "f", a file of a layer below`) {
		t.Errorf("cross-layer hard link: err %v", err)
	}
	flat, _ := convertImage(t, linked, convert.ImageOptions{SpecMediaTypes: true, Flatten: true})
	specCheck(t, flat, nil)
	got := convtest.TreeFromDir(t, convtest.MountStack(t, convtest.RawLayers(t, flat, t.TempDir())))
	if n := got.Node("l"); n == nil || n.Digest != sha256.Sum256([]byte("f\n")) {
		t.Errorf("flattened: l is %+v", n)
	}

	erofsLayer := &convtest.BlobLayer{Blob: []byte("an EROFS image"), Diff: convtest.SHA256([]byte("an EROFS image")), Type: convert.MediaTypeLayer}
	passed := convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755)), erofsLayer)
	if _, _, err := c.Image(context.Background(), passed, convtest.SourceDescriptor(t, passed)); err == nil || !strings.Contains(err.Error(), "application/vnd.erofs.layer.v1 is passed through as it is") {
		t.Errorf("containerd EROFS layer passed through: err %v", err)
	}
}

func countType(ls []v1.Descriptor, mt types.MediaType) int {
	n := 0
	for _, l := range ls {
		if l.MediaType == mt {
			n++
		}
	}
	return n
}

// convertsTheSame: the spec's reproducibility (§8.3): src converted again
// with opt is img, to the digest.
func convertsTheSame(t *testing.T, src v1.Image, opt convert.ImageOptions, img v1.Image) {
	t.Helper()
	again, _ := convertImage(t, src, opt)
	d1, err := img.Digest()
	must(t, err)
	d2, err := again.Digest()
	must(t, err)
	if d1 != d2 {
		t.Errorf("converted twice: %s, then %s", d1, d2)
	}
}

// checkSource runs ocierofs check of img against its source src, each
// difference a test error, and returns how many layers it compared.
func checkSource(t *testing.T, img, src v1.Image) int {
	t.Helper()
	res, err := check.Converted(context.Background(), &oci.Artifact{Image: img}, &oci.Artifact{Image: src, Descriptor: convtest.SourceDescriptor(t, src)},
		check.Options{TempDir: t.TempDir(), Report: func(s string) { t.Errorf("check: %s", s) }})
	must(t, err)
	return res.Layers
}
