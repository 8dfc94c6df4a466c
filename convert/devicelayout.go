package convert

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert/merge"
	"github.com/ocierofs/ocierofs/convert/spec"
)

// Layout is how the layers of a spec image compose (the EROFS image
// spec's roles, §2.4).
type Layout string

const (
	// LayoutOverlay: each layer an overlayfs lower layer, the lower ones
	// overlay-lower and the top one without a role (§11.1).
	LayoutOverlay Layout = ""
	// LayoutDevice: each converted layer a device (role device), and one
	// metadata layer on top, without a role, that stacks them (as
	// ocierofs merge does) and refers to their blocks by EROFS
	// multi-device addressing. Mounting the top layer with each device
	// layer as a device=, in order (§7), shows the merged root.
	LayoutDevice Layout = "device"
	// LayoutOverlayData: the layers stacked into two (overlaydata.Split):
	// a data layer of the files' contents, each once, with role
	// overlay-data, and a role-less metadata layer on top whose regular
	// files are overlayfs metacopy files redirected to their contents.
	// Overlayfs over the top layer with the data layer as a data-only
	// lower layer shows the merged root.
	LayoutOverlayData Layout = "overlay-data"
)

// checkLayout refuses a layout the other options cannot go with.
func (o ImageOptions) checkLayout() error {
	switch o.Layout {
	case LayoutOverlay:
		return nil
	case LayoutDevice, LayoutOverlayData:
	default:
		return fmt.Errorf("layout %q: want overlay, device or overlay-data", o.Layout)
	}
	switch {
	case !o.SpecMediaTypes:
		// Roles are the spec's: containerd's media types have none.
		return fmt.Errorf("the %s layout is made of the EROFS image spec's roles: it needs its media types", o.Layout)
	case o.Flatten:
		return fmt.Errorf("the %s layout stacks the layers in a metadata layer of its own: it is no flattened image", o.Layout)
	case o.Layout == LayoutOverlayData && len(o.Layer.PrefetchList) > 0:
		return errors.New("a prefetch list lays out each layer's files: it does not go with the overlay-data layout yet")
	}
	return nil
}

// DeviceMetaBy is the created_by of the metadata layer's history entry
// in the device layout (check takes it for the converter's).
const DeviceMetaBy = "ocierofs convert --layout device"

// addDeviceMeta makes the converted layers of jobs the devices of one
// metadata layer it adds on top of mf, with their roles, the layer's
// diff_id and its report; it returns the config's history with the
// metadata layer's entry.
func (c *Converter) addDeviceMeta(ctx context.Context, rep *ImageReport, out *outImage, mf *v1.Manifest, diffIDs *[]string,
	jobs []*layerJob, chain []string, cfg *v1.ConfigFile, srcDesc v1.Descriptor) ([]v1.History, error) {
	if len(jobs) == 0 {
		return nil, fmt.Errorf("image %s: no layers to make devices of", srcDesc.Digest)
	}
	var devs []*fileLayer
	for _, j := range jobs {
		fl, ok := j.layer.(*fileLayer)
		if !ok || j.report.Passthrough {
			return nil, sourceError(srcDesc.Digest, "image %s: layer %s is passed through as it is: the device layout needs each layer converted here", srcDesc.Digest, j.report.Source)
		}
		devs = append(devs, fl)
	}
	for i, d := range mf.Layers {
		if d.MediaType != MediaTypeSpec && d.MediaType != MediaTypeSpecZstd {
			continue // a standalone chunk index, which has no role
		}
		ann := maps.Clone(d.Annotations)
		ann[spec.AnnotationRole] = spec.RoleDevice
		mf.Layers[i].Annotations = ann
	}
	mj := c.job(ctx, "device-meta:"+strings.Join(chain, ","), Progress{Source: "meta:" + short(devs[len(devs)-1].digest)}, nil,
		func(j *layerJob) error { return c.deviceMetaLayer(ctx, j, devs) })
	if err := c.appendMetaLayer(ctx, mj, chain, rep, out, mf, diffIDs); err != nil {
		return nil, err
	}
	return append(slices.Clone(cfg.History), v1.History{Created: cfg.Created, CreatedBy: DeviceMetaBy,
		Comment: fmt.Sprintf("metadata of the %d layers below, their devices", len(devs))}), nil
}

// appendMetaLayer waits for mj, the job that writes a layout's metadata
// layer over the layers of chain, and adds its layer last to mf, with
// its diff_id and report.
func (c *Converter) appendMetaLayer(ctx context.Context, mj *layerJob, chain []string, rep *ImageReport, out *outImage,
	mf *v1.Manifest, diffIDs *[]string) error {
	select {
	case <-mj.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	if mj.err != nil {
		return mj.err
	}
	fl := mj.layer.(*fileLayer)
	ann := map[string]string{
		AnnotationSourceLayer:  strings.Join(chain, ","),
		AnnotationUncompressed: fl.diffID.String(),
	}
	maps.Copy(ann, fl.annotations)
	mf.Layers = append(mf.Layers, v1.Descriptor{MediaType: fl.mediaType, Digest: fl.digest, Size: fl.size, Annotations: ann})
	out.layers[fl.digest] = fl
	*diffIDs = append(*diffIDs, fl.diffID.String())
	rep.Layers = append(rep.Layers, mj.report)
	return nil
}

// deviceMetaLayer is the job that writes the metadata layer over devs
// (bottom first): merge.Images over their raw images, each device slot
// tagged with the hex of its layer's digest (§8.1.12), made a spec layer
// as the others are (zstd, chunk index, dm-verity).
func (c *Converter) deviceMetaLayer(ctx context.Context, j *layerJob, devs []*fileLayer) error {
	var raws, tags, sources []string
	var ids []v1.Hash
	for _, d := range devs {
		raws = append(raws, d.raw)
		tags = append(tags, d.digest.Hex)
		ids = append(ids, d.digest)
		sources = append(sources, d.sourceDigest.String())
	}
	j.report = LayerReport{Source: strings.Join(sources, ","), MediaType: string(devs[len(devs)-1].mediaType)}
	start := time.Now()
	dir, err := os.MkdirTemp(c.tmp, "device-meta-")
	if err != nil {
		return err
	}
	raw := filepath.Join(dir, "meta.erofs")
	opt := merge.Options{Erofs: c.opt.Layer.Erofs, Tags: tags}
	opt.Erofs.TempDir = dir
	opt.Erofs.Devices, opt.Erofs.Blob = nil, nil
	if opt.Erofs.UUID == ([16]byte{}) && !c.opt.Layer.KeepUUID {
		opt.Erofs.UUID = flatUUID(ids)
	}
	res, err := merge.Images(raw, raws, opt)
	if err != nil {
		return fmt.Errorf("metadata layer: %w", err)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fl, err := c.fileLayer(raw, devs[len(devs)-1].sourceDigest, res.Entries, nil)
	if err != nil {
		return fmt.Errorf("metadata layer: %w", err)
	}
	if fl.chunkIndex != nil {
		// §3.8: the top layer has no standalone chunk index after it.
		fl.chunkIndex = nil
	}
	fl.convertSeconds = time.Since(start).Seconds()
	c.logf("metadata layer over %d devices in %.2fs (%d bytes, %d entries, %d bytes of data copied)",
		len(devs), fl.convertSeconds, fl.size, fl.entries, res.CopiedBytes)
	return c.publish(ctx, j, fl)
}
