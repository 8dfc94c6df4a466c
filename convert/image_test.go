package convert_test

// End-to-end tests of `ocierofs convert`: images built by the test are
// pushed to a real registry (docker-registry, see registry_test.go),
// converted with convert.NewConverter + Image/Index + oci.Write as the CLI
// does, read back with go-containerregistry, checked against what
// containerd's EROFS snapshotter wants (media types, diff_ids, os.features,
// annotations), mounted (erofs + overlayfs) and compared with umoci's
// unpacking of the source. Faults come from a proxy between ocierofs and the
// registry.

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/oci"
)

// variant is what a conversion was asked for, hence what its output must
// look like.
type variant struct {
	zstd, spec, referrer bool
}

func (v variant) mediaType() types.MediaType {
	switch {
	case v.spec && v.zstd:
		return convert.MediaTypeSpecZstd
	case v.spec:
		return convert.MediaTypeSpec
	case v.zstd:
		return convert.MediaTypeLayerZstd
	}
	return convert.MediaTypeLayer
}

func (v variant) options() convert.ImageOptions {
	return convert.ImageOptions{LayerZstd: v.zstd, SpecMediaTypes: v.spec, Referrer: v.referrer, Jobs: 2}
}

// configMap is a config blob as generic JSON.
func configMap(t testing.TB, img v1.Image) map[string]any {
	t.Helper()
	raw, err := img.RawConfigFile()
	must(t, err)
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	must(t, dec.Decode(&m))
	return m
}

// checkConverted checks a converted image against its source and returns
// the raw EROFS image of each layer, written into a temp directory.
func checkConverted(t testing.TB, src v1.Image, srcDesc v1.Descriptor, got v1.Image, v variant) []string {
	t.Helper()
	sm, err := src.Manifest()
	must(t, err)
	gm, err := got.Manifest()
	must(t, err)
	if gm.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest mediaType %q, want %q", gm.MediaType, types.OCIManifestSchema1)
	}
	if gm.Config.MediaType != types.OCIConfigJSON {
		t.Errorf("config mediaType %q, want %q", gm.Config.MediaType, types.OCIConfigJSON)
	}
	if a := gm.Annotations[convert.AnnotationSourceManifest]; a != srcDesc.Digest.String() {
		t.Errorf("manifest annotation %s = %q, want the source manifest digest %s", convert.AnnotationSourceManifest, a, srcDesc.Digest)
	}
	if len(gm.Layers) != len(sm.Layers) {
		t.Fatalf("%d layers, the source has %d", len(gm.Layers), len(sm.Layers))
	}
	cf, err := got.ConfigFile()
	must(t, err)
	for i, l := range gm.Layers {
		if l.MediaType != v.mediaType() {
			t.Errorf("layer %d: mediaType %q, want %q", i, l.MediaType, v.mediaType())
		}
		if a := l.Annotations[convert.AnnotationSourceLayer]; a != sm.Layers[i].Digest.String() {
			t.Errorf("layer %d: annotation %s = %q, want the source layer digest %s", i, convert.AnnotationSourceLayer, a, sm.Layers[i].Digest)
		}
		a, ok := l.Annotations[convert.AnnotationUncompressed]
		switch {
		case v.spec && a != cf.RootFS.DiffIDs[i].String():
			t.Errorf("layer %d: annotation %s = %q, want the diff_id %s", i, convert.AnnotationUncompressed, a, cf.RootFS.DiffIDs[i])
		case !v.spec && ok:
			t.Errorf("layer %d: annotation %s without spec media types", i, convert.AnnotationUncompressed)
		}
	}
	switch {
	case v.referrer && gm.Subject == nil:
		t.Errorf("no subject with Referrer")
	case v.referrer:
		want := v1.Descriptor{MediaType: srcDesc.MediaType, Digest: srcDesc.Digest, Size: srcDesc.Size}
		if !reflect.DeepEqual(*gm.Subject, want) {
			t.Errorf("subject %+v, want the source manifest %+v", *gm.Subject, want)
		}
	case gm.Subject != nil:
		t.Errorf("subject %+v without Referrer", *gm.Subject)
	}

	// The config: os.features gains "erofs", rootfs.diff_ids are the raw
	// EROFS images' digests, everything else is the source's.
	if !slices.Contains(cf.OSFeatures, "erofs") {
		t.Errorf("config os.features %q lacks \"erofs\"", cf.OSFeatures)
	}
	if cf.RootFS.Type != "layers" {
		t.Errorf("config rootfs.type %q", cf.RootFS.Type)
	}
	scf, err := src.ConfigFile()
	must(t, err)
	if !reflect.DeepEqual(cf.History, scf.History) {
		t.Errorf("history changed:\n got %+v\nwant %+v", cf.History, scf.History)
	}
	if !reflect.DeepEqual(cf.Config.Env, scf.Config.Env) || !reflect.DeepEqual(cf.Config.Entrypoint, scf.Config.Entrypoint) ||
		!reflect.DeepEqual(cf.Config.Cmd, scf.Config.Cmd) {
		t.Errorf("env/entrypoint/cmd changed: %q %q %q, want %q %q %q",
			cf.Config.Env, cf.Config.Entrypoint, cf.Config.Cmd, scf.Config.Env, scf.Config.Entrypoint, scf.Config.Cmd)
	}
	if !cf.Created.Equal(scf.Created.Time) {
		t.Errorf("created %s, want %s", cf.Created, scf.Created)
	}
	gotMap, srcMap := configMap(t, got), configMap(t, src)
	delete(gotMap, "rootfs")
	delete(srcMap, "rootfs")
	if f, ok := gotMap["os.features"].([]any); ok {
		gotMap["os.features"] = slices.DeleteFunc(slices.Clone(f), func(x any) bool { return x == "erofs" })
		if len(gotMap["os.features"].([]any)) == 0 && srcMap["os.features"] == nil {
			delete(gotMap, "os.features")
		}
	}
	if !reflect.DeepEqual(gotMap, srcMap) {
		g, _ := json.Marshal(gotMap)
		s, _ := json.Marshal(srcMap)
		t.Errorf("config changed beyond rootfs and os.features:\n got %s\nwant %s", g, s)
	}
	return convtest.RawLayers(t, got, t.TempDir())
}

// remoteImage reads an image back from the registry, with its descriptor.
func remoteImage(t testing.TB, r name.Reference, extra ...remote.Option) (v1.Image, *remote.Descriptor) {
	t.Helper()
	d, err := remote.Get(r, direct(extra...)...)
	if err != nil {
		t.Fatalf("get %s: %v", r, err)
	}
	if d.MediaType.IsIndex() {
		t.Fatalf("%s is an index (%s), want a single manifest", r, d.MediaType)
	}
	img, err := d.Image()
	must(t, err)
	return img, d
}

func TestE2ERegistry(t *testing.T) {
	reg := sharedRegistry(t)
	src := convtest.Image(t, "amd64", convtest.TestImageLayers(t)...)
	srcRef := ref(t, reg.host, "e2e/base:v1")
	pushImage(t, srcRef, src)
	srcDesc := convtest.SourceDescriptor(t, src)

	// The CLI's default: containerd media types, target tag + "-erofs".
	base := mustConvert(t, srcRef.String(), "", variant{}.options(), oci.Remote{})
	logTimings(t, "test image (4 layers, Jobs 2)", base)
	if want := reg.host + "/e2e/base:v1-erofs"; base.target.String() != want {
		t.Errorf("default target %s, want %s", base.target, want)
	}
	if base.index {
		t.Errorf("a single-manifest source became an index")
	}
	var baseDiffIDs []v1.Hash

	t.Run("containerd", func(t *testing.T) {
		got, d := remoteImage(t, base.target.Name)
		if d.Digest.String() != base.digest {
			t.Errorf("registry has %s, the report says %s", d.Digest, base.digest)
		}
		layers := checkConverted(t, src, srcDesc, got, variant{})
		cf, err := got.ConfigFile()
		must(t, err)
		baseDiffIDs = cf.RootFS.DiffIDs
		want, merged := convtest.CompareWithUmoci(t, src, layers)
		// The implied directories of layer 4 keep what layer 1 gave them.
		for _, tr := range []*fstree.Tree{want, merged} {
			if m := convtest.ModeOf(t, tr, "etc/apt"); m != 0o750 {
				t.Errorf("etc/apt mode %#o, want 0750", m)
			}
			if n := tr.Node("etc/apt"); n.Uid != 0 || n.Gid != 0 {
				t.Errorf("etc/apt owner %d:%d, want 0:0", n.Uid, n.Gid)
			}
			if n := tr.Node("etc/apt/apt.conf"); n == nil {
				t.Errorf("no etc/apt/apt.conf")
			}
			if n := tr.Node("usr/local/bin/ping"); n == nil || n.Xattrs["security.capability"] != convtest.CapNetRaw || n.Xattrs["user.e2e.origin"] != "layer3" {
				t.Errorf("usr/local/bin/ping: xattrs lost: %+v", n)
			}
			if n := tr.Node("usr/local/bin/suid"); n == nil || n.Perm() != 0o4755 {
				t.Errorf("usr/local/bin/suid: not 04755: %+v", n)
			}
			if n := tr.Node("dev/null"); n == nil || n.Type() != erofs.S_IFCHR || n.Devmajor != 1 || n.Devminor != 3 {
				t.Errorf("dev/null: not char 1:3: %+v", n)
			}
			if n := tr.Node("var/cache/app/new.dat"); n == nil {
				t.Errorf("no var/cache/app/new.dat")
			}
			wantLinks := [][]string{{"usr/local/bin/hello", "usr/local/bin/hello-link", "usr/local/hello-too"}}
			if g := tr.LinkGroups(); !reflect.DeepEqual(g, wantLinks) {
				t.Errorf("hard-link groups %q, want %q", g, wantLinks)
			}
			if n := tr.Node("home/user"); n == nil || n.Perm() != 0o700 || n.Xattrs["user.e2e.home"] != "layer3" {
				t.Errorf("home/user: not as layer 3 left it: %+v", n)
			}
			if tr.Node("var/cache/app/new.dat") == nil || tr.Node("var/cache/app/late.dat") == nil {
				t.Errorf("var/cache/app lost a file of layer 3 or 4")
			}
			for _, gone := range []string{"etc/motd", "opt/legacy", "bin/ls", "var/cache/app/old.dat", "var/cache/app/olddir"} {
				if tr.Node(gone) != nil {
					t.Errorf("%s survived its whiteout", gone)
				}
			}
		}
	})

	for _, tc := range []struct {
		name string
		v    variant
	}{
		{"zstd", variant{zstd: true}},
		{"spec", variant{spec: true}},
		{"spec+zstd", variant{spec: true, zstd: true}},
		{"referrer", variant{referrer: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := srcRef.Context().Tag("v1-" + strings.ReplaceAll(tc.name, "+", "-")).String()
			res := mustConvert(t, srcRef.String(), target, tc.v.options(), oci.Remote{})
			got, _ := remoteImage(t, res.target.Name)
			checkConverted(t, src, srcDesc, got, tc.v)
			cf, err := got.ConfigFile()
			must(t, err)
			// The raw EROFS images do not depend on the wrapping.
			if baseDiffIDs != nil && !reflect.DeepEqual(cf.RootFS.DiffIDs, baseDiffIDs) {
				t.Errorf("diff_ids %v differ from the plain conversion's %v", cf.RootFS.DiffIDs, baseDiffIDs)
			}
			if tc.v.referrer {
				idx, err := remote.Referrers(srcRef.Context().Digest(srcDesc.Digest.String()), direct()...)
				must(t, err)
				im, err := idx.IndexManifest()
				must(t, err)
				found := false
				for _, m := range im.Manifests {
					found = found || m.Digest.String() == res.digest
				}
				if !found {
					t.Errorf("the referrers of %s do not list the converted manifest %s: %+v", srcDesc.Digest, res.digest, im.Manifests)
				}
			}
		})
	}

	t.Run("determinism", func(t *testing.T) {
		// Another converter, one job at a time: the same manifest.
		opt := variant{}.options()
		opt.Jobs = 1
		again := mustConvert(t, srcRef.String(), srcRef.Context().Tag("v1-again").String(), opt, oci.Remote{})
		if again.digest != base.digest {
			t.Errorf("second conversion gives %s, the first gave %s", again.digest, base.digest)
		}
		// A rerun to the same target uploads no blob again.
		ct := newCountingTransport()
		rerun := mustConvert(t, srcRef.String(), "", variant{}.options(), oci.Remote{Transport: ct})
		if rerun.digest != base.digest {
			t.Errorf("rerun gives %s, the first run gave %s", rerun.digest, base.digest)
		}
		if up := ct.uploads(); len(up) != 0 {
			t.Errorf("the rerun uploaded blobs again: %q", up)
		}
		// go-containerregistry skips the manifest PUT when the tag already
		// has that digest; one PUT at most.
		if ct.manifestPuts > 1 {
			t.Errorf("the rerun put %d manifests", ct.manifestPuts)
		}
		got, _ := remoteImage(t, base.target.Name)
		if d, _ := got.Digest(); d.String() != base.digest {
			t.Errorf("after the rerun %s is %s, want %s", base.target, d, base.digest)
		}
	})
}

func TestE2EIndex(t *testing.T) {
	reg := sharedRegistry(t)
	shared := convtest.Layer(t, convtest.Dir(".", 0o755), convtest.Dir("etc", 0o755), convtest.File("etc/os-release", 0o644, []byte("ID=e2e\n")))
	amd := convtest.Image(t, "amd64", shared, convtest.Layer(t, convtest.Dir("bin", 0o755), convtest.File("bin/arch", 0o755, []byte("x86_64\n"))))
	arm := convtest.Image(t, "arm64", shared, convtest.Layer(t, convtest.Dir("bin", 0o755), convtest.File("bin/arch", 0o755, []byte("aarch64\n")), convtest.File("bin/extra", 0o644, []byte("arm only\n"))))
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.AppendManifests(idx,
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}}},
	)
	srcRef := ref(t, reg.host, "e2e/multi:v1")
	srcDigest := pushIndex(t, srcRef, idx)
	srcIM, err := idx.IndexManifest()
	must(t, err)

	// readIndex reads a converted index and checks each manifest in it.
	readIndex := func(t *testing.T, r name.Reference, features bool) *v1.IndexManifest {
		d, err := remote.Get(r, direct()...)
		must(t, err)
		if !d.MediaType.IsIndex() {
			t.Fatalf("%s is %s, want an index", r, d.MediaType)
		}
		ii, err := d.ImageIndex()
		must(t, err)
		im, err := ii.IndexManifest()
		must(t, err)
		if a := im.Annotations[convert.AnnotationSourceManifest]; a != srcDigest.String() {
			t.Errorf("index annotation %s = %q, want %s", convert.AnnotationSourceManifest, a, srcDigest)
		}
		var firstLayers []v1.Hash
		for _, m := range im.Manifests {
			if m.Platform == nil {
				t.Fatalf("manifest %s without a platform", m.Digest)
			}
			switch {
			case features && !reflect.DeepEqual(m.Platform.OSFeatures, []string{"erofs"}):
				t.Errorf("%s: platform.os.features %q, want [erofs]", m.Platform, m.Platform.OSFeatures)
			case !features && len(m.Platform.OSFeatures) != 0:
				t.Errorf("%s: platform.os.features %q with NoIndexOSFeatures", m.Platform, m.Platform.OSFeatures)
			}
			var srcDesc v1.Descriptor
			for _, s := range srcIM.Manifests {
				if s.Platform.Architecture == m.Platform.Architecture {
					srcDesc = s
				}
			}
			if srcDesc.Digest == (v1.Hash{}) {
				t.Fatalf("converted %s has no source manifest", m.Platform)
			}
			if m.Platform.OS != srcDesc.Platform.OS || m.Platform.Variant != srcDesc.Platform.Variant {
				t.Errorf("platform %s, source %s", m.Platform, srcDesc.Platform)
			}
			if a := m.Annotations[convert.AnnotationSourceManifest]; a != srcDesc.Digest.String() {
				t.Errorf("%s: descriptor annotation %s = %q, want %s", m.Platform, convert.AnnotationSourceManifest, a, srcDesc.Digest)
			}
			img, err := ii.Image(m.Digest)
			must(t, err)
			srcImg, err := idx.Image(srcDesc.Digest)
			must(t, err)
			sd := srcDesc
			sd.Platform, sd.Annotations = nil, nil
			checkConverted(t, srcImg, sd, img, variant{})
			gm, err := img.Manifest()
			must(t, err)
			// The shared base layer is converted once, to one blob.
			if firstLayers == nil {
				firstLayers = []v1.Hash{gm.Layers[0].Digest}
			} else if gm.Layers[0].Digest != firstLayers[0] {
				t.Errorf("the shared base layer became %s and %s", firstLayers[0], gm.Layers[0].Digest)
			}
		}
		return im
	}

	t.Run("all platforms", func(t *testing.T) {
		res := mustConvert(t, srcRef.String(), "", convert.ImageOptions{Jobs: 2}, oci.Remote{})
		logTimings(t, "two-platform index", res)
		if !res.index || len(res.images) != 2 {
			t.Fatalf("index %v with %d images, want an index of 2", res.index, len(res.images))
		}
		im := readIndex(t, res.target.Name, true)
		if len(im.Manifests) != 2 {
			t.Fatalf("%d manifests, want 2", len(im.Manifests))
		}
		var archs []string
		for _, m := range im.Manifests {
			archs = append(archs, m.Platform.Architecture)
		}
		if !reflect.DeepEqual(archs, []string{"amd64", "arm64"}) {
			t.Errorf("platforms %q, want the source's order [amd64 arm64]", archs)
		}
	})
	t.Run("NoIndexOSFeatures", func(t *testing.T) {
		res := mustConvert(t, srcRef.String(), srcRef.Context().Tag("v1-nofeatures").String(),
			convert.ImageOptions{NoIndexOSFeatures: true}, oci.Remote{})
		if im := readIndex(t, res.target.Name, false); len(im.Manifests) != 2 {
			t.Errorf("%d manifests, want 2", len(im.Manifests))
		}
	})
	t.Run("Platforms", func(t *testing.T) {
		res := mustConvert(t, srcRef.String(), srcRef.Context().Tag("v1-arm64").String(),
			convert.ImageOptions{Platforms: []v1.Platform{{OS: "linux", Architecture: "arm64"}}}, oci.Remote{})
		im := readIndex(t, res.target.Name, true)
		if len(im.Manifests) != 1 || im.Manifests[0].Platform.Architecture != "arm64" {
			t.Errorf("manifests %+v, want one for linux/arm64", im.Manifests)
		}
	})
	t.Run("no platform matches", func(t *testing.T) {
		_, err := convertRef(context.Background(), t, srcRef.String(), srcRef.Context().Tag("v1-s390x").String(),
			convert.ImageOptions{Platforms: []v1.Platform{{OS: "linux", Architecture: "s390x"}}}, oci.Remote{})
		if err == nil || !strings.Contains(err.Error(), "no manifest matches") {
			t.Errorf("err = %v, want no manifest matches", err)
		}
		requireAbsent(t, srcRef.Context().Tag("v1-s390x"))
	})
}

// TestE2ESharedUpperLayer converts an index whose platforms share their
// upper layer over lower layers of their own, as a multi-arch build that
// copies the same files onto each base does. The shared layer converts once
// per lower chain, in jobs that run at once, and the images differ: the
// directory it only implies takes each lower layer's metadata. Once, those
// jobs wrote one temp file, and the registry refused the blobs (or a
// layout target kept a blob that was not its digest).
func TestE2ESharedUpperLayer(t *testing.T) {
	reg := sharedRegistry(t)
	big := make([]byte, 8<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>13)
	}
	upper := convtest.Layer(t, convtest.File("app/data.bin", 0o644, big), convtest.File("app/README", 0o644, []byte("shared\n")))
	platforms := []struct {
		arch, variant string
		mode          int64
	}{{"amd64", "", 0o755}, {"arm64", "v8", 0o750}, {"arm", "v7", 0o700}, {"ppc64le", "", 0o711}}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		lower := convtest.Layer(t, convtest.Dir(".", 0o755), convtest.Dir("app", p.mode), convtest.File("base-"+p.arch, 0o644, []byte(p.arch+"\n")))
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: convtest.Image(t, p.arch, lower, upper),
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: p.arch, Variant: p.variant}}})
	}
	srcRef := ref(t, reg.host, uniq("e2e/shared")+":v1")
	pushIndex(t, srcRef, idx)

	// check reads the converted index at r: every platform converted, its
	// layers' blobs and diff_ids right (convtest.RawLayers), the stack equal to
	// umoci's unpack, and the shared layer's images all different.
	check := func(t *testing.T, ii v1.ImageIndex) string {
		im, err := ii.IndexManifest()
		must(t, err)
		if len(im.Manifests) != len(platforms) {
			t.Fatalf("%d manifests, want %d", len(im.Manifests), len(platforms))
		}
		uppers := map[v1.Hash]string{}
		for i, m := range im.Manifests {
			img, err := ii.Image(m.Digest)
			must(t, err)
			srcImg, err := idx.Image(mustIndexManifest(t, idx).Manifests[i].Digest)
			must(t, err)
			layers := convtest.RawLayers(t, img, t.TempDir())
			convtest.CompareWithUmoci(t, srcImg, layers)
			gm, err := img.Manifest()
			must(t, err)
			if prev, ok := uppers[gm.Layers[1].Digest]; ok {
				t.Errorf("%s and %s got the same upper layer %s over different lower layers", prev, m.Platform, gm.Layers[1].Digest)
			}
			uppers[gm.Layers[1].Digest] = m.Platform.String()
		}
		d, err := ii.Digest()
		must(t, err)
		return d.String()
	}
	opt := convert.ImageOptions{Jobs: 4}
	res := mustConvert(t, srcRef.String(), "", opt, oci.Remote{})
	d, err := remote.Get(res.target.Name, direct()...)
	must(t, err)
	ii, err := d.ImageIndex()
	must(t, err)
	first := check(t, ii)

	// Into a layout: every blob is its digest, and the index the same.
	dir := t.TempDir()
	lres := mustConvert(t, srcRef.String(), "oci:"+dir+":v1", opt, oci.Remote{})
	if lres.digest != first {
		t.Errorf("layout target: index %s, the registry's %s", lres.digest, first)
	}
	blobs, err := filepath.Glob(filepath.Join(dir, "blobs", "sha256", "*"))
	must(t, err)
	for _, b := range blobs {
		data, err := os.ReadFile(b)
		must(t, err)
		if got := convtest.SHA256(data).Hex; got != filepath.Base(b) {
			t.Errorf("layout blob %s holds sha256:%s", filepath.Base(b), got)
		}
	}
	p, err := layout.FromPath(dir)
	must(t, err)
	lii, err := p.ImageIndex()
	must(t, err)
	lim, err := lii.IndexManifest()
	must(t, err)
	nested, err := lii.ImageIndex(lim.Manifests[0].Digest)
	must(t, err)
	check(t, nested)

	// Flattened, the images share their top layer and their number of
	// layers: each still gets its own merged layer.
	fres := mustConvert(t, srcRef.String(), srcRef.Context().Tag("v1-flat").String(), convert.ImageOptions{Jobs: 4, Flatten: true}, oci.Remote{})
	d, err = remote.Get(fres.target.Name, direct()...)
	must(t, err)
	fii, err := d.ImageIndex()
	must(t, err)
	for i, m := range mustIndexManifest(t, fii).Manifests {
		img, err := fii.Image(m.Digest)
		must(t, err)
		srcImg, err := idx.Image(mustIndexManifest(t, idx).Manifests[i].Digest)
		must(t, err)
		convtest.CompareWithUmoci(t, srcImg, convtest.RawLayers(t, img, t.TempDir()))
	}
}

func mustIndexManifest(t testing.TB, ii v1.ImageIndex) *v1.IndexManifest {
	t.Helper()
	im, err := ii.IndexManifest()
	must(t, err)
	return im
}

// TestE2EIndexShapes converts indexes as BuildKit, docker and others write
// them: a nested index, an image whose descriptor names no platform (its
// config does), an attestation, an arm64 entry without a variant; and an
// image without layers.
func TestE2EIndexShapes(t *testing.T) {
	reg := sharedRegistry(t)
	layer := func(arch string) v1.Layer {
		return convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("arch", 0o644, []byte(arch+"\n")))
	}
	amd := convtest.Image(t, "amd64", layer("amd64"))
	arm := convtest.Image(t, "arm64", layer("arm64"))
	s390 := convtest.Image(t, "s390x", layer("s390x"))
	att := convtest.Image(t, "unknown", layer("attestation"))
	inner := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	outer := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: inner},
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: s390},
		mutate.IndexAddendum{Add: att, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"}}},
	)
	repo := uniq("e2e/shapes")
	srcRef := ref(t, reg.host, repo+":v1")
	pushIndex(t, srcRef, outer)

	// read lists the converted index at tag: each image's architecture
	// (read from its layer's one file, the image mounted and compared
	// with umoci), nested ones under "nested/".
	var read func(t *testing.T, ii v1.ImageIndex, prefix string) []string
	read = func(t *testing.T, ii v1.ImageIndex, prefix string) []string {
		var got []string
		for _, d := range mustIndexManifest(t, ii).Manifests {
			if d.MediaType.IsIndex() {
				sub, err := ii.ImageIndex(d.Digest)
				must(t, err)
				got = append(got, read(t, sub, prefix+"nested/")...)
				continue
			}
			img, err := ii.Image(d.Digest)
			must(t, err)
			cf, err := img.ConfigFile()
			must(t, err)
			src := map[string]v1.Image{"amd64": amd, "arm64": arm, "s390x": s390}[cf.Architecture]
			if src == nil {
				t.Fatalf("converted image of %s", cf.Architecture)
			}
			convtest.CompareWithUmoci(t, src, convtest.RawLayers(t, img, t.TempDir()))
			if d.Platform == nil && cf.Architecture != "s390x" {
				t.Errorf("%s lost its descriptor's platform", cf.Architecture)
			}
			got = append(got, prefix+cf.Architecture)
		}
		return got
	}
	for _, tc := range []struct {
		name, platforms string
		want            []string
	}{
		{"all", "", []string{"nested/arm64", "amd64", "s390x"}},
		{"arm64/v8 is arm64", "linux/arm64/v8", []string{"nested/arm64"}},
		{"platform from the config", "linux/s390x", []string{"s390x"}},
		{"aarch64 and x86_64", "linux/aarch64,linux/x86_64", []string{"nested/arm64", "amd64"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opt := convert.ImageOptions{}
			if tc.platforms != "" {
				for _, p := range strings.Split(tc.platforms, ",") {
					pl, err := v1.ParsePlatform(p)
					must(t, err)
					opt.Platforms = append(opt.Platforms, *pl)
				}
			}
			target := srcRef.Context().Tag(strings.ReplaceAll(strings.ReplaceAll(tc.name, " ", "-"), "/", "-")).String()
			res := mustConvert(t, srcRef.String(), target, opt, oci.Remote{})
			if len(res.images) != len(tc.want) {
				t.Errorf("report of %d images, want %d", len(res.images), len(tc.want))
			}
			d, err := remote.Get(res.target.Name, direct()...)
			must(t, err)
			ii, err := d.ImageIndex()
			must(t, err)
			if got := read(t, ii, ""); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("converted %q, want %q", got, tc.want)
			}
		})
	}
	t.Run("none matches", func(t *testing.T) {
		_, err := convertRef(context.Background(), t, srcRef.String(), srcRef.Context().Tag("riscv").String(),
			convert.ImageOptions{Platforms: []v1.Platform{{OS: "linux", Architecture: "riscv64"}}}, oci.Remote{})
		if err == nil || !strings.Contains(err.Error(), "no manifest matches the selected platforms (linux/riscv64): it has linux/arm64, linux/amd64, linux/s390x") {
			t.Errorf("err = %v, want the platforms asked for and those the index has", err)
		}
		requireAbsent(t, srcRef.Context().Tag("riscv"))
	})
	t.Run("no layers", func(t *testing.T) {
		empty := convtest.Image(t, "amd64")
		r := ref(t, reg.host, repo+":empty")
		pushImage(t, r, empty)
		res := mustConvert(t, r.String(), "", convert.ImageOptions{}, oci.Remote{})
		got, _ := remoteImage(t, res.target.Name)
		raw, err := got.RawManifest()
		must(t, err)
		cfg, err := got.RawConfigFile()
		must(t, err)
		if !bytes.Contains(raw, []byte(`"layers":[]`)) || !bytes.Contains(cfg, []byte(`"diff_ids":[]`)) {
			t.Errorf("manifest %s\nconfig %s\nwant \"layers\": [] and \"diff_ids\": []", raw, cfg)
		}
	})
}

func TestE2ELayout(t *testing.T) {
	t.Run("round trip", func(t *testing.T) {
		dir := t.TempDir()
		src := convtest.Image(t, "amd64", convtest.TestImageLayers(t)...)
		srcRef, err := oci.ParseRef("oci:"+filepath.Join(dir, "src")+":v1", false)
		must(t, err)
		must(t, oci.Write(context.Background(), srcRef, src, nil, oci.Remote{}))
		dst := "oci:" + filepath.Join(dir, "dst") + ":v2"
		res := mustConvert(t, srcRef.String(), dst, variant{}.options(), oci.Remote{})
		dstRef, err := oci.ParseRef(dst, false)
		must(t, err)
		art, err := oci.Get(context.Background(), dstRef, oci.Remote{})
		if err != nil {
			t.Fatalf("open the converted layout: %v", err)
		}
		if art.Image == nil || art.Descriptor.Digest.String() != res.digest {
			t.Fatalf("layout holds %s (image %v), the report says %s", art.Descriptor.Digest, art.Image != nil, res.digest)
		}
		layers := checkConverted(t, src, convtest.SourceDescriptor(t, src), art.Image, variant{})
		convtest.CompareWithUmoci(t, src, layers)

		// The default target of a layout is the same layout, tag + suffix.
		def := mustConvert(t, srcRef.String(), "", variant{}.options(), oci.Remote{})
		if want := "oci:" + filepath.Join(dir, "src") + ":v1-erofs"; def.target.String() != want {
			t.Errorf("default target %s, want %s", def.target, want)
		}
		if def.digest != res.digest {
			t.Errorf("the same source converted to %s and %s", res.digest, def.digest)
		}
		art, err = oci.Get(context.Background(), def.target, oci.Remote{})
		must(t, err)
		if art.Descriptor.Digest.String() != def.digest {
			t.Errorf("oci:…:v1-erofs is %s, want %s", art.Descriptor.Digest, def.digest)
		}
		// The source is still there, under its own tag.
		if art, err := oci.Get(context.Background(), srcRef, oci.Remote{}); err != nil {
			t.Errorf("source lost: %v", err)
		} else if d, _ := src.Digest(); art.Descriptor.Digest != d {
			t.Errorf("source tag moved to %s", art.Descriptor.Digest)
		}
	})

	t.Run("busybox", func(t *testing.T) {
		fixture, err := filepath.Abs("../testdata/busybox")
		must(t, err)
		dst := "oci:" + filepath.Join(t.TempDir(), "bb") + ":latest-erofs"
		res := mustConvert(t, "oci:"+fixture+":latest", dst, variant{}.options(), oci.Remote{})
		logTimings(t, "testdata/busybox", res)
		dstRef, err := oci.ParseRef(dst, false)
		must(t, err)
		art, err := oci.Get(context.Background(), dstRef, oci.Remote{})
		if err != nil {
			t.Fatalf("open the converted layout: %v", err)
		}
		p, err := layout.FromPath(fixture)
		must(t, err)
		ii, err := p.ImageIndex()
		must(t, err)
		im, err := ii.IndexManifest()
		must(t, err)
		src, err := ii.Image(im.Manifests[0].Digest)
		must(t, err)
		sd := im.Manifests[0]
		sd.Annotations, sd.ArtifactType = nil, ""
		layers := checkConverted(t, src, sd, art.Image, variant{})
		want, got := convtest.CompareWithUmoci(t, src, layers)
		for _, tr := range []*fstree.Tree{want, got} {
			if m := convtest.ModeOf(t, tr, "etc/apt"); m != 0o750 {
				t.Errorf("etc/apt mode %#o, want 0750", m)
			}
		}
	})
}

// TestE2EBusyboxFixture checks that testdata/busybox is a valid image:
// containerd and umoci check each layer's diff_id.
func TestE2EBusyboxFixture(t *testing.T) {
	p, err := layout.FromPath("../testdata/busybox")
	must(t, err)
	ii, err := p.ImageIndex()
	must(t, err)
	im, err := ii.IndexManifest()
	must(t, err)
	img, err := ii.Image(im.Manifests[0].Digest)
	must(t, err)
	cf, err := img.ConfigFile()
	must(t, err)
	ls, err := img.Layers()
	must(t, err)
	for i, l := range ls {
		rc, err := l.Uncompressed()
		must(t, err)
		h, _, err := v1.SHA256(rc)
		rc.Close()
		must(t, err)
		dg, _ := l.Digest()
		if cf.RootFS.DiffIDs[i] != h {
			t.Errorf("BUG testdata/mkimage: layer %d (%s): config diff_id %s, but the uncompressed tar hashes to %s (static.NewLayer takes the gzip blob for the uncompressed content)",
				i, dg, cf.RootFS.DiffIDs[i], h)
		}
	}
}

func TestE2EDockerArchive(t *testing.T) {
	dir := t.TempDir()
	src := convtest.Image(t, "amd64", convtest.TestImageLayers(t)...)
	tag, err := name.NewTag("example.com/e2e/archive:v1")
	must(t, err)
	archive := filepath.Join(dir, "image.tar")
	must(t, tarball.WriteToFile(archive, tag, src))

	srcRef, err := oci.ParseRef("docker-archive:"+archive, false)
	must(t, err)
	if _, err := oci.DefaultTarget(srcRef, "-erofs"); err == nil {
		t.Errorf("DefaultTarget(%s) gave a target; a docker-archive cannot be written", srcRef)
	}
	dst := "oci:" + filepath.Join(dir, "out") + ":v1-erofs"
	res := mustConvert(t, srcRef.String(), dst, variant{}.options(), oci.Remote{})
	art, err := oci.Get(context.Background(), res.target, oci.Remote{})
	must(t, err)
	// The archive holds a Docker manifest (its descriptor says so); the
	// converted image is OCI.
	archived, err := oci.Get(context.Background(), srcRef, oci.Remote{})
	must(t, err)
	layers := checkConverted(t, archived.Image, archived.Descriptor, art.Image, variant{})
	convtest.CompareWithUmoci(t, src, layers)
}

func TestE2EFaults(t *testing.T) {
	reg := sharedRegistry(t)
	src := convtest.Image(t, "amd64", convtest.TestImageLayers(t)...)
	srcRef := ref(t, reg.host, "e2e/faults:v1")
	pushImage(t, srcRef, src)
	want := mustConvert(t, srcRef.String(), "", variant{}.options(), oci.Remote{})
	m, err := src.Manifest()
	must(t, err)

	// through converts srcRef via the proxy into repo:tag (a repository of
	// its own, so that every converted blob is uploaded through the
	// proxy too).
	through := func(t *testing.T, p *faultProxy, repoTag string) (*e2eResult, error) {
		return convertRef(context.Background(), t, p.host+"/e2e/faults:v1", p.host+"/"+repoTag, variant{}.options(), oci.Remote{})
	}

	t.Run("layer downloads dropped once", func(t *testing.T) {
		p := newFaultProxy(t, reg.host)
		layers := map[string]bool{}
		for _, l := range m.Layers {
			layers[l.Digest.String()] = true
		}
		p.drop = func(rq faultRequest) bool { return rq.N == 1 && layers[rq.Digest] }
		res, err := through(t, p, "e2e/faults-dropped:v1")
		if err != nil {
			t.Fatalf("convert through the proxy: %v", err)
		}
		if res.digest != want.digest {
			t.Errorf("result %s, without faults %s", res.digest, want.digest)
		}
		dropped, _ := p.stats()
		for dg := range layers {
			if dropped[dg] != 1 {
				t.Errorf("blob %s: dropped %d times, want 1 (did the fault happen?)", dg, dropped[dg])
			}
		}
	})

	t.Run("config download dropped once", func(t *testing.T) {
		p := newFaultProxy(t, reg.host)
		cfg := m.Config.Digest.String()
		p.drop = func(rq faultRequest) bool { return rq.N == 1 && rq.Digest == cfg }
		res, err := through(t, p, "e2e/faults-config:v1")
		if err != nil {
			t.Fatalf("BUG: a connection dropped once in the middle of the config blob fails the conversion: %v", err)
		}
		if res.digest != want.digest {
			t.Errorf("result %s, without faults %s", res.digest, want.digest)
		}
		if dropped, _ := p.stats(); dropped[cfg] != 1 {
			t.Errorf("config blob dropped %d times, want 1", dropped[cfg])
		}
	})

	t.Run("500 and 429 once", func(t *testing.T) {
		p := newFaultProxy(t, reg.host)
		p.status = func(rq faultRequest) int {
			if rq.N != 1 {
				return 0
			}
			switch {
			case rq.Method == "GET" && rq.Class == "manifest":
				return 500
			case rq.Method == "GET" && rq.Class == "blob":
				return 429
			case rq.Method == "HEAD" && rq.Class == "blob":
				return 500
			case rq.Method == "POST" && rq.Class == "upload":
				return 429
			case rq.Method == "PUT" && rq.Class == "manifest":
				return 500
			}
			return 0
		}
		repo := uniq("e2e/faults-status")
		res, err := through(t, p, repo+":v1")
		if err != nil {
			t.Fatalf("convert through the proxy: %v", err)
		}
		if res.digest != want.digest {
			t.Errorf("result %s, without faults %s", res.digest, want.digest)
		}
		_, failed := p.stats()
		t.Logf("%d injected errors: %q", len(failed), failed)
		for _, kind := range []string{"GET /v2/e2e/faults/manifests/", "GET /v2/e2e/faults/blobs/", "POST /v2/" + repo + "/blobs/uploads/", "PUT /v2/" + repo + "/manifests/"} {
			if !slices.ContainsFunc(failed, func(f string) bool { return strings.HasPrefix(f, kind) }) {
				t.Errorf("no error injected for %s…: the test does not test it", kind)
			}
		}
		got, _ := remoteImage(t, ref(t, reg.host, repo+":v1"))
		if d, _ := got.Digest(); d.String() != want.digest {
			t.Errorf("the registry has %s, want %s", d, want.digest)
		}
	})

	t.Run("a layer always broken", func(t *testing.T) {
		p := newFaultProxy(t, reg.host)
		bad := m.Layers[2].Digest.String()
		p.drop = func(rq faultRequest) bool { return rq.Digest == bad }
		start := time.Now()
		_, err := through(t, p, "e2e/faults-broken:v1")
		t.Logf("failed after %.1fs: %v", time.Since(start).Seconds(), err)
		if err == nil {
			t.Fatalf("converted although layer %s never downloads", bad)
		}
		if !strings.Contains(err.Error(), bad) {
			t.Errorf("error does not name the layer %s: %v", bad, err)
		}
		requireAbsent(t, ref(t, reg.host, "e2e/faults-broken:v1"))
		if dropped, _ := p.stats(); dropped[bad] < 2 {
			t.Errorf("layer fetched %d times: no retry", dropped[bad])
		}
	})
}

func TestE2EBadInput(t *testing.T) {
	reg := sharedRegistry(t)
	ctx := context.Background()

	t.Run("unknown reference", func(t *testing.T) {
		r := reg.host + "/e2e/does-not-exist:v1"
		_, err := convertRef(ctx, t, r, "", convert.ImageOptions{}, oci.Remote{})
		if err == nil || !strings.Contains(err.Error(), r) {
			t.Errorf("err = %v, want one naming %s", err, r)
		}
		requireAbsent(t, ref(t, reg.host, "e2e/does-not-exist:v1-erofs"))
	})

	good := convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("a", 0o644, []byte("a\n")))
	garbage := convtest.RandomBytes(7, 5000)
	valid := convtest.Gzip(t, convtest.LayerTar(t, convtest.File("b", 0o644, convtest.RandomBytes(8, 20000))))
	flipped := bytes.Clone(valid)
	for i := len(flipped) / 3; i < len(flipped)/3+16; i++ {
		flipped[i] ^= 0xff
	}
	for _, tc := range []struct {
		name  string
		layer *convtest.BlobLayer
		want  string // besides the layer digest
	}{
		// A valid gzip stream of bytes that are no tar.
		{"gzip of garbage", &convtest.BlobLayer{Blob: convtest.Gzip(t, garbage), Diff: convtest.SHA256(garbage), Type: types.OCILayer}, ""},
		// A gzip stream with flipped bytes, pushed under its own digest:
		// the registry and go-containerregistry find nothing wrong.
		{"gzip with flipped bytes", &convtest.BlobLayer{Blob: flipped, Diff: convtest.SHA256(convtest.LayerTar(t, convtest.File("b", 0o644, convtest.RandomBytes(8, 20000)))), Type: types.OCILayer}, ""},
		{"unsupported media type", &convtest.BlobLayer{Blob: valid, Diff: convtest.SHA256(valid), Type: "application/vnd.example.layer.v1+squashfs"}, "application/vnd.example.layer.v1+squashfs"},
		// A sound layer whose config diff_id is that of another tar (here:
		// the gzip blob's digest, a common tooling mistake).
		{"wrong diff_id", &convtest.BlobLayer{Blob: valid, Diff: convtest.SHA256(valid), Type: types.OCILayer}, "diff_id " + convtest.SHA256(valid).String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			repo := "e2e/bad-" + strings.ReplaceAll(tc.name, " ", "-")
			img := convtest.Image(t, "amd64", good, tc.layer)
			pushImage(t, ref(t, reg.host, repo+":v1"), img)
			badDigest, _ := tc.layer.Digest()
			_, err := convertRef(ctx, t, reg.host+"/"+repo+":v1", "", convert.ImageOptions{}, oci.Remote{})
			if err == nil {
				t.Fatalf("converted an image with a bad layer")
			}
			t.Logf("error: %v", err)
			if !strings.Contains(err.Error(), badDigest.String()) {
				t.Errorf("error does not name the layer %s: %v", badDigest, err)
			}
			if tc.want != "" && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not name %q: %v", tc.want, err)
			}
			requireAbsent(t, ref(t, reg.host, repo+":v1-erofs"))
		})
	}
}

func TestE2EAuth(t *testing.T) {
	const user, password = "e2e", "s3cret-Passw0rd"
	reg := authRegistry(t, user, password)
	creds := remote.WithAuth(&authn.Basic{Username: user, Password: password})
	src := convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("hello", 0o644, []byte("hi\n"))))
	srcRef := ref(t, reg.host, "e2e/private:v1")
	pushImage(t, srcRef, src, creds)

	login := func(password string) oci.Remote {
		r, err := oci.Remote{}.WithCredential(reg.host, oci.Credential{Username: user, Password: password})
		must(t, err)
		return r
	}
	t.Run("right password", func(t *testing.T) {
		res := mustConvert(t, srcRef.String(), "", convert.ImageOptions{}, login(password))
		got, _ := remoteImage(t, res.target.Name, creds)
		checkConverted(t, src, convtest.SourceDescriptor(t, src), got, variant{})
	})
	for _, tc := range []struct {
		name string
		rem  oci.Remote
	}{
		{"wrong password", login("wrong")},
		{"another registry password", func() oci.Remote {
			r, err := oci.Remote{}.WithCredential("other.example:5000", oci.Credential{Username: user, Password: password})
			must(t, err)
			return r
		}()},
		{"no credentials", oci.Remote{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := srcRef.Context().Tag("v1-" + strings.ReplaceAll(tc.name, " ", "-"))
			_, err := convertRef(context.Background(), t, srcRef.String(), target.String(), convert.ImageOptions{}, tc.rem)
			if err == nil {
				t.Fatalf("converted with %s", tc.name)
			}
			t.Logf("error: %v", err)
			if !strings.Contains(err.Error(), srcRef.String()) {
				t.Errorf("error does not name %s: %v", srcRef, err)
			}
			if !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
				t.Errorf("error does not say unauthorized: %v", err)
			}
			requireAbsent(t, target, creds)
		})
	}
}

// TestE2EInsecure converts an image on a registry whose certificate
// nobody signed: refused with a certificate error, done with --insecure.
func TestE2EInsecure(t *testing.T) {
	reg := tlsRegistry(t)
	skipVerify := remote.WithTransport(&http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}) //nolint:gosec // the test's own registry
	src := convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("hello", 0o644, []byte("over TLS\n"))))
	srcRef := ref(t, reg.host, "e2e/tls:v1")
	if err := remote.Write(srcRef, src, skipVerify); err != nil {
		t.Fatalf("push %s: %v", srcRef, err)
	}

	_, err := convertRef(context.Background(), t, srcRef.String(), "", convert.ImageOptions{}, oci.Remote{})
	if err == nil {
		t.Fatal("converted from a registry with an unknown certificate without --insecure")
	}
	t.Logf("error: %v", err)
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) && !strings.Contains(err.Error(), "certificate") {
		t.Errorf("error is not about the certificate: %v", err)
	}
	if !strings.Contains(err.Error(), srcRef.Context().RegistryStr()) {
		t.Errorf("error does not name the registry %s: %v", srcRef.Context().RegistryStr(), err)
	}
	requireAbsent(t, srcRef.Context().Tag("v1-erofs"), skipVerify)

	res := mustConvert(t, srcRef.String(), "", convert.ImageOptions{}, oci.Remote{Insecure: true})
	if res.target.Name.String() != srcRef.Context().Tag("v1-erofs").String() {
		t.Errorf("target %s, want %s", res.target.Name, srcRef.Context().Tag("v1-erofs"))
	}
	got, _ := remoteImage(t, res.target.Name, skipVerify)
	checkConverted(t, src, convtest.SourceDescriptor(t, src), got, variant{})
}

func TestE2ERefusal(t *testing.T) {
	reg := sharedRegistry(t)
	src := convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("x", 0o644, []byte("x\n"))))
	srcRef := ref(t, reg.host, "e2e/loop:v1-erofs")
	pushImage(t, srcRef, src)
	_, err := convertRef(context.Background(), t, srcRef.String(), "", convert.ImageOptions{}, oci.Remote{})
	if !errors.Is(err, oci.ErrLoop) {
		t.Errorf("err = %v, want oci.ErrLoop", err)
	}
	r, err := oci.ParseRef(srcRef.String(), false)
	must(t, err)
	if _, err := oci.DefaultTarget(r, "-erofs"); !errors.Is(err, oci.ErrLoop) {
		t.Errorf("DefaultTarget(%s): err = %v, want oci.ErrLoop", r, err)
	}
	requireAbsent(t, ref(t, reg.host, "e2e/loop:v1-erofs-erofs"))
	if !oci.HasSuffix(r, "-erofs") {
		t.Errorf("HasSuffix(%s, -erofs) = false", r)
	}
}

// gatedLayer is a layer whose first download waits for after (if not
// nil) and then stalls until gate is closed, as a slow registry would;
// started is closed when it begins.
type gatedLayer struct {
	*convtest.BlobLayer
	after   <-chan struct{}
	gate    chan struct{}
	started chan struct{}
	calls   atomic.Int32
}

func (l *gatedLayer) Compressed() (io.ReadCloser, error) {
	rc, err := l.BlobLayer.Compressed()
	if l.calls.Add(1) == 1 {
		close(l.started)
		if l.after != nil {
			<-l.after
		}
		if l.gate != nil {
			<-l.gate
		}
	}
	return rc, err
}

// TestIndexFirstFailureCancels: the first platform of an index to fail
// gives the error and stops the others: Index does not wait for a layer
// still downloading elsewhere (here, one that stalls until the test ends).
// A Converter used again after that runs the layers that failed or were
// stopped anew instead of handing out their old errors.
func TestIndexFirstFailureCancels(t *testing.T) {
	garbage := convtest.RandomBytes(7, 5000)
	raw := convtest.LayerTar(t, convtest.Dir(".", 0o755), convtest.File("slow", 0o644, convtest.RandomBytes(9, 100000)))
	slow := &gatedLayer{BlobLayer: &convtest.BlobLayer{Blob: convtest.Gzip(t, raw), Diff: convtest.SHA256(raw), Type: types.OCILayer}, gate: make(chan struct{}), started: make(chan struct{})}
	// The bad layer fails once the slow one is downloading.
	bad := &gatedLayer{BlobLayer: &convtest.BlobLayer{Blob: convtest.Gzip(t, garbage), Diff: convtest.SHA256(garbage), Type: types.OCILayer}, after: slow.started, started: make(chan struct{})}
	amd, arm := convtest.Image(t, "amd64", bad), convtest.Image(t, "arm64", slow)
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
	)
	idxDigest, err := idx.Digest()
	must(t, err)
	slowDigest, _ := slow.Digest()
	badDigest, _ := bad.Digest()
	stopped := make(chan struct{})
	var once sync.Once
	c, err := convert.NewConverter(convert.ImageOptions{TempDir: t.TempDir(), Jobs: 2, Progress: func(p convert.Progress) {
		if p.Source == slowDigest.String() && p.Stage == convert.StageInterrupted {
			once.Do(func() { close(stopped) })
		}
	}})
	must(t, err)
	defer c.Close()
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Index(context.Background(), idx, v1.Descriptor{MediaType: types.OCIImageIndex, Digest: idxDigest})
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		close(slow.gate)
		t.Fatal("Index still waits for the stalled platform 30s after the other failed")
	}
	t.Logf("error: %v", err)
	if err == nil || !strings.Contains(err.Error(), "linux/amd64") || !strings.Contains(err.Error(), badDigest.String()) || errors.Is(err, context.Canceled) {
		t.Errorf("err = %v; want the amd64 layer's own", err)
	}
	// The stalled download ends: its job stops at its next read.
	close(slow.gate)
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled layer's job went on converting after the index had failed")
	}

	// Used again, the Converter converts the stopped layer anew, as a
	// new Converter does.
	sameAsNewConverter(t, c, arm)
}

// sameAsNewConverter converts img with c, used before, and with a new
// Converter, and fails unless both make the same manifest.
func sameAsNewConverter(t *testing.T, c *convert.Converter, img v1.Image) {
	t.Helper()
	desc := convtest.SourceDescriptor(t, img)
	got, _, err := c.Image(context.Background(), img, desc)
	if err != nil {
		t.Fatalf("converted again: %v", err)
	}
	c2, err := convert.NewConverter(convert.ImageOptions{TempDir: t.TempDir()})
	must(t, err)
	defer c2.Close()
	want, _, err := c2.Image(context.Background(), img, desc)
	must(t, err)
	g, err := got.Digest()
	must(t, err)
	w, err := want.Digest()
	must(t, err)
	if g != w {
		t.Errorf("converted again: %s; by a new Converter: %s", g, w)
	}
}

// TestUploadFreesJobSlot: a converted layer waits for its upload without
// its conversion slot, so the next layer converts meanwhile (with one
// job, the upper layer used to start only once the lower one was
// uploaded).
func TestUploadFreesJobSlot(t *testing.T) {
	lower := convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("a", 0o644, convtest.RandomBytes(1, 50000)))
	upper := convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("b", 0o644, convtest.RandomBytes(2, 50000)))
	img := convtest.Image(t, "amd64", lower, upper)
	upperDigest, _ := upper.Digest()
	upperConverting := make(chan struct{})
	var once sync.Once
	var uploads atomic.Int32
	c, err := convert.NewConverter(convert.ImageOptions{
		TempDir: t.TempDir(),
		Jobs:    1,
		Progress: func(p convert.Progress) {
			if p.Source == upperDigest.String() && p.Stage == convert.StageConverting {
				once.Do(func() { close(upperConverting) })
			}
		},
		Publish: func(ctx context.Context, l v1.Layer) error {
			if uploads.Add(1) == 1 {
				// The lower layer's upload lasts until the upper
				// layer converts.
				select {
				case <-upperConverting:
				case <-time.After(30 * time.Second):
					return errors.New("the upper layer did not start converting during the lower one's upload")
				}
			}
			return nil
		},
	})
	must(t, err)
	defer c.Close()
	if _, _, err := c.Image(context.Background(), img, convtest.SourceDescriptor(t, img)); err != nil {
		t.Fatal(err)
	}
	if n := uploads.Load(); n != 2 {
		t.Errorf("%d uploads, want 2", n)
	}
}

// failingOnce is a layer whose first download fails (a registry error).
type failingOnce struct {
	*convtest.BlobLayer
	calls atomic.Int32
}

func (l *failingOnce) Compressed() (io.ReadCloser, error) {
	if l.calls.Add(1) == 1 {
		return nil, errors.New("the registry said no")
	}
	return l.BlobLayer.Compressed()
}

// TestConverterReusedAfterLowerFailed: a layer whose lower layer failed
// fails too, rather than be kept with defaults for the directories it
// implies; a Converter used again then makes the image a new one makes.
func TestConverterReusedAfterLowerFailed(t *testing.T) {
	rawLower := convtest.LayerTar(t, convtest.Dir(".", 0o755), convtest.Dir("opt", 0o700).Own(1000, 1000), convtest.File("opt/a", 0o644, []byte("a\n")))
	lower := &failingOnce{BlobLayer: &convtest.BlobLayer{Blob: convtest.Gzip(t, rawLower), Diff: convtest.SHA256(rawLower), Type: types.OCILayer}}
	upper := convtest.Layer(t, convtest.File("opt/f", 0o644, []byte("implies opt/\n")))
	img := convtest.Image(t, "amd64", lower, upper)
	desc := convtest.SourceDescriptor(t, img)
	upperDigest, _ := upper.Digest()
	upperEnded := make(chan struct{}, 2)
	c, err := convert.NewConverter(convert.ImageOptions{TempDir: t.TempDir(), Jobs: 2, Progress: func(p convert.Progress) {
		if p.Source == upperDigest.String() && (p.Stage == convert.StageDone || p.Stage == convert.StageFailed) {
			upperEnded <- struct{}{}
		}
	}})
	must(t, err)
	defer c.Close()
	if _, _, err := c.Image(context.Background(), img, desc); err == nil {
		t.Fatal("converted with the lower layer's download failing")
	}
	// The upper layer's job ends (it went on after the image failed).
	select {
	case <-upperEnded:
	case <-time.After(30 * time.Second):
		t.Fatal("the upper layer's job did not end")
	}
	sameAsNewConverter(t, c, img)
}
