package convert

import (
	"errors"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Platform selection, as docker and containerd match platforms: the
// architecture's other names (x86_64, aarch64, armhf) are the same
// architecture, and the variant an architecture has when none is given
// (arm64: v8, arm: v7, amd64: v1) matches that variant given. A selected
// platform without a variant takes every variant of its architecture.

// PlatformSelected reports whether p is one of want; nil wants all.
func PlatformSelected(want []v1.Platform, p v1.Platform) bool {
	if want == nil {
		return true
	}
	p.Architecture, p.Variant = normalizeArch(p.Architecture, p.Variant)
	for _, w := range want {
		anyVariant := w.Variant == ""
		w.Architecture, w.Variant = normalizeArch(w.Architecture, w.Variant)
		if anyVariant {
			w.Variant = ""
		}
		if p.Satisfies(w) {
			return true
		}
	}
	return false
}

// normalizeArch returns the usual name of an architecture and its variant,
// the default variant filled in.
func normalizeArch(arch, variant string) (string, string) {
	switch strings.ToLower(arch) {
	case "x86_64", "x86-64", "amd64":
		arch = "amd64"
		if variant == "" || variant == "1" {
			variant = "v1"
		}
	case "aarch64", "arm64":
		arch = "arm64"
		switch variant {
		case "", "8", "v8.0", "8.0":
			variant = "v8"
		}
	case "armhf":
		arch, variant = "arm", "v7"
	case "armel":
		arch, variant = "arm", "v6"
	case "arm":
		switch variant {
		case "":
			variant = "v7"
		case "5", "6", "7", "8":
			variant = "v" + variant
		}
	case "i386", "i686", "x86", "386":
		arch = "386"
	}
	return arch, variant
}

// errNoPlatform is the error of a source that has none of the platforms
// asked for.
var errNoPlatform = errors.New("no manifest matches the selected platforms")

// noPlatform names what was asked for and what the source has.
func noPlatform(what string, want []v1.Platform, have []string) error {
	var w []string
	for _, p := range want {
		w = append(w, p.String())
	}
	if len(have) == 0 {
		return fmt.Errorf("%s: %w (%s): it has no image with a platform", what, errNoPlatform, strings.Join(w, ", "))
	}
	return fmt.Errorf("%s: %w (%s): it has %s", what, errNoPlatform, strings.Join(w, ", "), strings.Join(have, ", "))
}

// CheckPlatform refuses an image (not an index) whose config names a
// platform other than the selected ones, as docker pull --platform does.
func (c *Converter) CheckPlatform(img v1.Image, desc v1.Descriptor) error {
	if c.opt.Platforms == nil {
		return nil
	}
	m, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("manifest %s: %w", desc.Digest, err)
	}
	if err := CheckConfigSize(m.Config); err != nil {
		return fmt.Errorf("image %s: %w", desc.Digest, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("config of %s: %w", desc.Digest, err)
	}
	p := cf.Platform()
	if p == nil || p.OS == "" {
		return nil // a config without a platform: nothing to go by
	}
	if !PlatformSelected(c.opt.Platforms, *p) {
		return noPlatform("image "+desc.Digest.String(), c.opt.Platforms, []string{p.String()})
	}
	return nil
}
