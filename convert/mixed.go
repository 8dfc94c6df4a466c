package convert

import (
	"context"
	"fmt"
	"maps"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/oci"
)

// A mixed index (convert --merge-platform) serves one reference to nodes
// with and without EROFS: it holds the source's manifests first, as they
// are, and the EROFS twin of each beside them, with "erofs" in its
// platform's os.features. A client that does not ask for that feature
// takes the tar manifest; one that does (containerd's
// --platform 'linux(+erofs)/amd64') takes the EROFS one, the match with
// more os.features. The tar manifests come first, as the EROFS image
// spec wants (§6), for clients that take the first match.

// MixedIndex is the mixed index of the source art and its twin (an index
// of Converter.Index, or an image of Converter.Image). It carries the
// source annotation, so that it is not converted again, and check
// compares it with its source as it does a twin: the entries that are not
// converted are the source's own.
func MixedIndex(art *oci.Artifact, twinIdx v1.ImageIndex, twinImg v1.Image) (v1.ImageIndex, error) {
	var idx v1.ImageIndex
	var adds []mutate.IndexAddendum
	ann := map[string]string{}
	if art.Index != nil {
		if twinIdx == nil {
			return nil, fmt.Errorf("%s: the twin of an index is an index", art.Ref)
		}
		im, err := art.Index.IndexManifest()
		if err != nil {
			return nil, err
		}
		maps.Copy(ann, im.Annotations)
		tm, err := twinIdx.IndexManifest()
		if err != nil {
			return nil, err
		}
		for _, d := range tm.Manifests {
			if !d.MediaType.IsImage() {
				return nil, fmt.Errorf("%s: a nested index (%s) has no place in a mixed index: convert without --merge-platform", art.Ref, d.Digest)
			}
			img, err := twinIdx.Image(d.Digest)
			if err != nil {
				return nil, err
			}
			adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: d})
		}
		// The source's entries stay byte for byte: the index is the
		// source's, with the twins appended.
		idx = art.Index
	} else {
		if twinImg == nil {
			return nil, fmt.Errorf("%s: the twin of an image is an image", art.Ref)
		}
		cf, err := art.Image.ConfigFile()
		if err != nil {
			return nil, fmt.Errorf("%s: config: %w", art.Ref, err)
		}
		p := cf.Platform()
		if p == nil || p.OS == "" || p.Architecture == "" {
			return nil, fmt.Errorf("%s: its config names no platform: a mixed index tells its manifests apart by platform", art.Ref)
		}
		tp := *p
		tp.OSFeatures = append(append([]string(nil), p.OSFeatures...), "erofs")
		src := art.Descriptor
		src.Platform = p
		adds = append(adds,
			mutate.IndexAddendum{Add: art.Image, Descriptor: src},
			mutate.IndexAddendum{Add: twinImg, Descriptor: v1.Descriptor{Platform: &tp,
				Annotations: map[string]string{AnnotationSourceManifest: art.Descriptor.Digest.String()}}})
		idx = mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	}
	idx = mutate.AppendManifests(idx, adds...)
	ann[AnnotationSourceManifest] = art.Descriptor.Digest.String()
	return mutate.Annotations(idx, ann).(v1.ImageIndex), nil
}

// WriteMixed converts art and writes its mixed index (MixedIndex) to dst:
// WriteTwin for convert --merge-platform. Its Twin's Digest is the mixed
// index's.
func (c *Converter) WriteMixed(ctx context.Context, art *oci.Artifact, dst oci.Ref, rem oci.Remote) (*Twin, error) {
	if c.opt.NoIndexOSFeatures {
		return nil, fmt.Errorf("a mixed index tells its EROFS manifests by os.features: leave out no-index-os-features")
	}
	tw := &Twin{Index: true}
	var twinIdx v1.ImageIndex
	var twinImg v1.Image
	var err error
	if art.Index != nil {
		var rep *IndexReport
		if twinIdx, rep, err = c.Index(ctx, art.Index, art.Descriptor); err != nil {
			return nil, err
		}
		tw.Images = rep.Images
	} else {
		var rep *ImageReport
		if twinImg, rep, err = c.Image(ctx, art.Image, art.Descriptor); err != nil {
			return nil, err
		}
		cf, err := art.Image.ConfigFile()
		if err == nil && cf.Platform() != nil {
			rep.Platform = cf.Platform().String()
		}
		tw.Images = []*ImageReport{rep}
	}
	mixed, err := MixedIndex(art, twinIdx, twinImg)
	if err != nil {
		return nil, err
	}
	dg, err := mixed.Digest()
	if err != nil {
		return nil, err
	}
	tw.Digest = dg.String()
	if err := oci.Write(ctx, dst, nil, mixed, rem); err != nil {
		return nil, err
	}
	tw.Written = true
	return tw, nil
}
