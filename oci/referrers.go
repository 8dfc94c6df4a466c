package oci

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// A Referrer is an image whose manifest names another as its subject.
type Referrer struct {
	v1.Descriptor
	Image v1.Image
}

// ErofsReferrers lists the images of repo that refer to the manifest d
// and have EROFS layers (containerd's media types or the EROFS image
// spec's): the conversions made with convert --referrer. They are found
// through the registry's referrers API, or, on a registry without one,
// through the tag the OCI distribution spec's referrers tag schema puts
// in its place (sha256-<hex>, an index of the referrers), which
// go-containerregistry reads when the API answers 404.
func ErofsReferrers(ctx context.Context, repo name.Repository, d v1.Hash, rem Remote) ([]Referrer, error) {
	opts := rem.Options(ctx)
	idx, err := remote.Referrers(repo.Digest(d.String()), opts...)
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var out []Referrer
	for _, r := range im.Manifests {
		if !r.MediaType.IsImage() {
			continue
		}
		img, err := remote.Image(repo.Digest(r.Digest.String()), opts...)
		if err != nil {
			return nil, fmt.Errorf("referrer %s: %w", r.Digest, err)
		}
		m, err := img.Manifest()
		if err != nil {
			return nil, fmt.Errorf("referrer %s: %w", r.Digest, err)
		}
		if m.Subject == nil || m.Subject.Digest != d || !erofsLayers(m) {
			continue
		}
		out = append(out, Referrer{Descriptor: r, Image: img})
	}
	return out, nil
}

// erofsLayers reports a manifest with an EROFS filesystem layer.
func erofsLayers(m *v1.Manifest) bool {
	for _, l := range m.Layers {
		mt := string(l.MediaType)
		if strings.HasPrefix(mt, "application/vnd.erofs") && !strings.HasPrefix(mt, "application/vnd.erofs.chunk-index") {
			return true
		}
	}
	return false
}
