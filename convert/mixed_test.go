package convert_test

import (
	"context"
	"slices"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/check"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/oci"
)

// writeMixed converts the registry reference src into its mixed index,
// written to dst, as convert --merge-platform does.
func writeMixed(t testing.TB, src, dst string, opt convert.ImageOptions) *oci.Artifact {
	t.Helper()
	ctx := context.Background()
	sref, err := oci.ParseRef(src, false)
	must(t, err)
	dref, err := oci.ParseRef(dst, false)
	must(t, err)
	art, err := oci.Get(ctx, sref, oci.Remote{})
	must(t, err)
	opt.TempDir = t.TempDir()
	c, err := convert.NewConverter(opt)
	must(t, err)
	defer c.Close()
	if _, err := c.WriteMixed(ctx, art, dref, oci.Remote{}); err != nil {
		t.Fatalf("mixed index of %s: %v", src, err)
	}
	return art
}

// TestMixedIndex: convert --merge-platform, in place, makes the source's
// tag an index of the source's manifests, first and as they were, and an
// EROFS twin of each image beside them with "erofs" in its platform; it
// conforms to the EROFS image spec (in its media types), check finds each
// twin equal to its source, it is not converted again, and a whole-index
// copy to another repository (crane copy, remote.WriteIndex) keeps every
// manifest.
func TestMixedIndex(t *testing.T) {
	reg := sharedRegistry(t)
	amd := specSource(t, "amd64")
	arm := specSource(t, "arm64")
	att := convtest.Image(t, "unknown", convtest.Layer(t, convtest.File("attestation.json", 0o644, []byte("{}\n"))))
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}}},
		mutate.IndexAddendum{Add: att, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"}}})
	srcIM, err := idx.IndexManifest()
	must(t, err)

	for _, tc := range []struct {
		name string
		opt  convert.ImageOptions
	}{
		{"containerd media types", convert.ImageOptions{}},
		{"spec media types", convert.ImageOptions{SpecMediaTypes: true, LayerZstd: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := ref(t, reg.host, uniq("e2e/mixed")+":v1")
			pushIndex(t, r, idx)
			srcArt := writeMixed(t, r.String(), r.String(), tc.opt)

			d, err := remote.Get(r, direct()...)
			must(t, err)
			mixed, err := d.ImageIndex()
			must(t, err)
			im, err := mixed.IndexManifest()
			must(t, err)
			if len(im.Manifests) != 5 {
				t.Fatalf("%d manifests, want the source's 3 and 2 twins: %+v", len(im.Manifests), im.Manifests)
			}
			for i, s := range srcIM.Manifests {
				if g := im.Manifests[i]; g.Digest != s.Digest || !g.Platform.Equals(*s.Platform) {
					t.Errorf("entry %d: %s %+v, want the source's %s %+v", i, g.Digest, g.Platform, s.Digest, s.Platform)
				}
			}
			for i, e := range im.Manifests[3:] {
				want := *srcIM.Manifests[i].Platform
				want.OSFeatures = []string{"erofs"}
				if e.Platform == nil || !e.Platform.Equals(want) || e.Annotations[convert.AnnotationSourceManifest] != srcIM.Manifests[i].Digest.String() {
					t.Errorf("twin %d: platform %+v, annotations %v: want %+v, the source entry %s", i, e.Platform, e.Annotations, want, srcIM.Manifests[i].Digest)
				}
			}
			mixedArt := &oci.Artifact{Ref: oci.Ref{Kind: oci.Registry, Name: r}, Descriptor: d.Descriptor, Index: mixed}
			if tc.opt.SpecMediaTypes {
				specCheck(t, nil, mixed)
			}
			res, err := check.Converted(context.Background(), mixedArt, srcArt,
				check.Options{TempDir: t.TempDir(), Report: func(s string) { t.Errorf("check: %s", s) }})
			must(t, err)
			if res.Images != 2 {
				t.Errorf("check compared %d images, want the 2 twins", res.Images)
			}
			if why := convert.Converted(mixedArt); why == "" {
				t.Errorf("the mixed index is not taken for a conversion")
			}

			// crane copy: the whole index, into another repository.
			cp := ref(t, reg.host, uniq("e2e/mixed-copy")+":v1")
			must(t, remote.WriteIndex(cp, mixed, direct()...))
			cd, err := remote.Get(cp, direct()...)
			must(t, err)
			if cd.Digest != d.Digest {
				t.Errorf("copied: %s, want %s", cd.Digest, d.Digest)
			}
			for _, e := range im.Manifests {
				img, err := remote.Image(cp.Context().Digest(e.Digest.String()), direct()...)
				must(t, err)
				ls, err := img.Layers()
				must(t, err)
				for _, l := range ls {
					dg, err := l.Digest()
					must(t, err)
					if _, err := remote.Layer(cp.Context().Digest(dg.String()), direct()...); err != nil {
						t.Errorf("copy %s: layer %s of %s: %v", cp, dg, e.Digest, err)
					}
				}
			}
		})
	}

	t.Run("image", func(t *testing.T) {
		r := ref(t, reg.host, uniq("e2e/mixed-image")+":v1")
		srcDigest := pushImage(t, r, amd)
		dst := r.Context().Tag("both").String()
		writeMixed(t, r.String(), dst, convert.ImageOptions{SpecMediaTypes: true})
		dref, err := oci.ParseRef(dst, false)
		must(t, err)
		art, err := oci.Get(context.Background(), dref, oci.Remote{})
		must(t, err)
		if art.Index == nil {
			t.Fatalf("%s is no index", dst)
		}
		im, err := art.Index.IndexManifest()
		must(t, err)
		if len(im.Manifests) != 2 || im.Manifests[0].Digest != srcDigest || im.Manifests[0].Platform == nil ||
			im.Manifests[0].Platform.Architecture != "amd64" || len(im.Manifests[0].Platform.OSFeatures) != 0 ||
			im.Manifests[1].Platform == nil || !slices.Equal(im.Manifests[1].Platform.OSFeatures, []string{"erofs"}) {
			t.Errorf("mixed index of an image: %+v", im.Manifests)
		}
		specCheck(t, nil, art.Index)
	})
}
