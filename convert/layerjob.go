package convert

import (
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The layer jobs of a Converter, for packages that convert layers through
// it without making an image of them (convert/cache).

// LayerMode says how StartLayers makes the EROFS image of a layer.
type LayerMode int

const (
	// SkipLayer leaves the layer unread.
	SkipLayer LayerMode = iota
	// LayerAlone makes the layer's image of the layer alone, as
	// containerd's differ does: the directories it implies are root-owned
	// 0755, and an opaque marker on its root whites out nothing.
	LayerAlone
	// LayerOverLower makes the layer's image over the layers below it
	// (those started before it), as Image does.
	LayerOverLower
	// ScanLayer reads the layer only for what the layers above it take
	// from it (its directories); it makes no image.
	ScanLayer
)

// LayerJob is the conversion of one layer that StartLayers started. The
// Converter shares it with every image and platform that has the same
// layers up to it (made alone: the same layer).
type LayerJob struct{ j *layerJob }

// LayerFile is the EROFS image a LayerJob made: a file in the Converter's
// temp directory, there until Close, shared by the callers that share the
// job.
type LayerFile struct {
	Path string
	Size int64
	// Implied are the directories the layer implies without listing them,
	// whose metadata comes from the layers below (root-owned 0755 when
	// made alone); RootOpaque says it has an opaque marker on its root,
	// whose whiteouts depend on the layers below.
	Implied    []string
	RootOpaque bool
	Warnings   []string
	// ConvertSeconds is how long the conversion took.
	ConvertSeconds float64
}

// ReadImage reads the manifest and config of src (of descriptor srcDesc)
// and checks that they agree: at most MaxLayers layers, a diff_id for
// each.
func ReadImage(ctx context.Context, src v1.Image, srcDesc v1.Descriptor) (*v1.Manifest, *v1.ConfigFile, error) {
	m, _, cfg, err := readImage(ctx, src, srcDesc)
	return m, cfg, err
}

// IsTarLayer reports whether mt is the media type of a tar layer, which
// the Converter converts (an EROFS or non-distributable layer passes
// through).
func IsTarLayer(mt types.MediaType) bool { return isTarLayer(mt) }

// StartLayers starts converting the layers of src (manifest m, diffIDs
// from its config) as modes says, one mode per layer, and returns their
// jobs (nil for SkipLayer). A layer made over the layers below waits for
// their directories, from the jobs started before it.
func (c *Converter) StartLayers(ctx context.Context, src v1.Image, m *v1.Manifest, diffIDs []v1.Hash, modes []LayerMode) ([]*LayerJob, error) {
	if len(modes) > len(m.Layers) || len(diffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("%d modes and %d diff_ids for %d layers", len(modes), len(diffIDs), len(m.Layers))
	}
	jobs := make([]*LayerJob, len(modes))
	var chain []string
	var lowerOps []*dirOps
	for i, mode := range modes {
		d := m.Layers[i]
		chain = append(chain, d.Digest.String())
		if mode == SkipLayer {
			continue
		}
		l, err := src.LayerByDigest(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("layer %s: %w", d.Digest, err)
		}
		ls := layerSource{desc: d, layer: l, diffID: diffIDs[i], alone: mode == LayerAlone}
		key, waiting := "alone:"+d.Digest.String(), Progress{Source: d.Digest.String(), Total: d.Size}
		if mode != LayerAlone {
			ls.lower, key = slices.Clone(lowerOps), strings.Join(chain, ",")
			if mode == ScanLayer { // read for the layers above it: not shown
				ls.scan, key, waiting = true, "scan:"+key, Progress{}
			}
		}
		j := c.job(ctx, key, waiting, ls.lower, func(j *layerJob) error { return c.convertLayer(ctx, j, ls) })
		jobs[i] = &LayerJob{j}
		lowerOps = append(lowerOps, j.ops)
	}
	return jobs, nil
}

// Wait waits for the job (or for ctx to end) and returns the image it
// made: nil for a ScanLayer job and for a layer passed through.
func (j *LayerJob) Wait(ctx context.Context) (*LayerFile, error) {
	select {
	case <-j.j.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if j.j.err != nil {
		return nil, j.j.err
	}
	fl, ok := j.j.layer.(*fileLayer)
	if !ok {
		return nil, nil
	}
	return &LayerFile{Path: fl.raw, Size: fl.rawSize, Implied: fl.implied, RootOpaque: fl.rootOpaque,
		Warnings: fl.warnings, ConvertSeconds: fl.convertSeconds}, nil
}

// EachImage runs image on each image of the index src that the selected
// platforms take (in nested indexes too), all at once, and returns their
// results in the index's order. platform names the image's platform. The
// first to fail cancels the others (their ctx); its error is returned,
// naming the platform.
func EachImage[R any](ctx context.Context, c *Converter, src v1.ImageIndex, srcDesc v1.Descriptor,
	image func(ctx context.Context, img v1.Image, desc v1.Descriptor, platform string) (R, error)) ([]R, error) {
	_, results, err := eachEntry(ctx, c, src, srcDesc,
		func(ctx context.Context, img v1.Image, e indexEntry) ([]R, error) {
			r, err := image(ctx, img, e.desc, platformString(e.platform))
			return []R{r}, err
		},
		func(ctx context.Context, nested v1.ImageIndex, e indexEntry) ([]R, error) {
			return EachImage(ctx, c, nested, e.desc, image)
		})
	if err != nil {
		return nil, err
	}
	var all []R
	for _, rs := range results {
		all = append(all, rs...)
	}
	return all, nil
}
