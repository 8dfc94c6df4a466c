package convert

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert/overlaydata"
	"github.com/ocierofs/ocierofs/convert/spec"
)

// OverlayDataBy is the created_by of the history entries of the
// overlay-data layout's two layers.
const OverlayDataBy = "ocierofs convert --layout overlay-data"

// startOverlayData starts the job that stacks srcs (bottom first) and
// writes the overlay-data layout's data layer; the metadata layer it
// writes beside it is published by addOverlayDataMeta.
func (c *Converter) startOverlayData(ctx context.Context, srcs []layerSource, chain []string, srcDesc v1.Descriptor) (*layerJob, error) {
	if len(srcs) == 0 {
		return nil, fmt.Errorf("image %s: no layers to stack", srcDesc.Digest)
	}
	return c.job(ctx, "overlay-data:"+strings.Join(chain, ","), Progress{Source: strings.Join(chain, ",")}, nil,
		func(j *layerJob) error { return c.overlayDataLayer(ctx, j, srcs) }), nil
}

// overlayDataLayer is the job that flattens srcs into one image, as
// --flatten does, splits it into the data and metadata layers
// (overlaydata.Split), and publishes the data layer.
func (c *Converter) overlayDataLayer(ctx context.Context, j *layerJob, srcs []layerSource) error {
	rep, err := stackedReport(srcs, "the overlay-data layout stacks tar layers, not one")
	if err != nil {
		return err
	}
	j.report = rep
	start := time.Now()
	var flat string
	var entries int
	var warnings []string
	_, err = c.retryDownloads(ctx, "overlay-data", func() (_ *fileLayer, err error) {
		flat, entries, warnings, err = c.writeFlat(ctx, srcs, j.report)
		return nil, err
	})
	if err != nil {
		return err
	}
	defer os.Remove(flat)
	fl, err := c.splitFlat(j, flat, srcs, warnings)
	if err != nil {
		return err
	}
	fl.convertSeconds = time.Since(start).Seconds()
	c.logf("overlay-data layer of %d layers in %.2fs (%d entries, %d bytes)", len(srcs), fl.convertSeconds, entries, fl.size)
	return c.publish(ctx, j, fl)
}

// splitFlat splits the flattened image flat of srcs into j's data layer,
// which it returns, and the metadata layer's raw image (j.metaRaw).
func (c *Converter) splitFlat(j *layerJob, flat string, srcs []layerSource, warnings []string) (*fileLayer, error) {
	dir, err := os.MkdirTemp(c.tmp, "overlay-data-")
	if err != nil {
		return nil, err
	}
	meta, data := filepath.Join(dir, "meta.erofs"), filepath.Join(dir, "data.erofs")
	opt := c.opt.Layer.Erofs
	opt.TempDir = dir
	opt.Devices, opt.Blob = nil, nil // each layer holds its own data
	if opt.UUID == ([16]byte{}) && !c.opt.Layer.KeepUUID {
		var ids []v1.Hash
		for _, s := range srcs {
			ids = append(ids, s.diffID)
		}
		opt.UUID = flatUUID(ids)
	}
	res, err := overlaydata.Split(flat, meta, data, opt)
	if err != nil {
		return nil, err
	}
	c.logf("overlay-data: %d contents, %d bytes (%d bytes of duplicates stored once)", res.Payloads, res.PayloadBytes, res.DuplicateBytes)
	j.metaRaw, j.metaEntries = meta, res.Entries
	return c.fileLayer(data, srcs[len(srcs)-1].desc.Digest, res.Payloads, warnings)
}

// addOverlayDataMeta gives the data layer of dj its role and publishes
// the metadata layer dj wrote, last in mf, with its diff_id and report;
// it returns the config's history: an entry for each of the two layers.
func (c *Converter) addOverlayDataMeta(ctx context.Context, rep *ImageReport, out *outImage, mf *v1.Manifest, diffIDs *[]string,
	dj *layerJob, chain []string, cfg *v1.ConfigFile, srcDesc v1.Descriptor) ([]v1.History, error) {
	data := dj.layer.(*fileLayer)
	mf.Layers[0].Annotations = maps.Clone(mf.Layers[0].Annotations)
	mf.Layers[0].Annotations[spec.AnnotationRole] = spec.RoleOverlayData
	mj := c.job(ctx, "overlay-meta:"+strings.Join(chain, ","), Progress{Source: "meta:" + short(data.digest)}, nil,
		func(j *layerJob) error { return c.overlayMetaLayer(ctx, j, dj, data) })
	if err := c.appendMetaLayer(ctx, mj, chain, rep, out, mf, diffIDs); err != nil {
		return nil, err
	}
	return []v1.History{
		{Created: cfg.Created, CreatedBy: OverlayDataBy, Comment: fmt.Sprintf("file contents of the %d layers of %s", len(chain), srcDesc.Digest)},
		{Created: cfg.Created, CreatedBy: OverlayDataBy, Comment: "metadata, its files redirected to the contents below"},
	}, nil
}

// overlayMetaLayer is the job that makes the metadata layer dj wrote a
// spec layer as the others are (zstd, chunk index, dm-verity), without a
// standalone chunk index: §3.8 keeps an EROFS layer last.
func (c *Converter) overlayMetaLayer(ctx context.Context, j *layerJob, dj *layerJob, data *fileLayer) error {
	j.report = LayerReport{Source: dj.report.Source, MediaType: dj.report.MediaType}
	fl, err := c.fileLayer(dj.metaRaw, data.sourceDigest, dj.metaEntries, nil)
	if err != nil {
		return fmt.Errorf("metadata layer: %w", err)
	}
	fl.chunkIndex = nil
	return c.publish(ctx, j, fl)
}
