package check

import (
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/spec"
	"github.com/ocierofs/ocierofs/erofs"
)

// deviceLayout reports whether layers (standalone chunk indexes left out)
// are the device layout (LayoutDevice) of a source of n layers: n device
// layers and one role-less layer after them.
func deviceLayout(layers []v1.Descriptor, n int) bool {
	if len(layers) != n+1 || n == 0 {
		return false
	}
	for _, d := range layers[:n] {
		if d.Annotations[spec.AnnotationRole] != spec.RoleDevice {
			return false
		}
	}
	_, has := layers[n].Annotations[spec.AnnotationRole]
	return !has
}

// deviceMeta checks the metadata layer d of the device layout against
// want, the source's layers stacked: read with the device layers devs as
// its devices, in order, each slot tagged with its layer's digest
// (§8.1.12). The device layers are spooled into TempDir at once.
func (c *checker) deviceMeta(where string, img v1.Image, d v1.Descriptor, diffID v1.Hash, devs []v1.Descriptor, want *fstree.Tree) error {
	var opts []erofs.OpenOption
	for i, dd := range devs {
		l, err := img.LayerByDigest(dd.Digest)
		if err != nil {
			return fmt.Errorf("%s: device %d: %w", where, i+1, err)
		}
		f, size, _, _, err := c.spool(l)
		if err != nil {
			return fmt.Errorf("%s: device %d: %s: %w", where, i+1, dd.Digest, err)
		}
		defer f.Close()
		opts = append(opts, erofs.WithDevice(f, size))
	}
	if err := c.layer(where, img, d, diffID, v1.Descriptor{}, want, false, opts...); err != nil {
		return err
	}
	l, err := img.LayerByDigest(d.Digest)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	f, size, _, _, err := c.spool(l)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", where, d.Digest, err)
	}
	defer f.Close()
	return c.deviceTags(where, f, size, devs)
}

// deviceTags compares the device slots of the image in f with devs.
func (c *checker) deviceTags(where string, f *os.File, size int64, devs []v1.Descriptor) error {
	ei, err := erofs.Open(f, size)
	if err != nil {
		return nil // c.layer has said so
	}
	slots := ei.Devices()
	if len(slots) != len(devs) {
		c.diff(where, "%d devices, and %d device layers below it", len(slots), len(devs))
		return nil
	}
	for i, s := range slots {
		if s.Tag != devs[i].Digest.Hex {
			c.diff(where, "device %d is tagged %q, not its layer's digest %s", i+1, s.Tag, devs[i].Digest.Hex)
		}
	}
	return nil
}
