package convert_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/check"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/oci"
)

// checkRefs runs check.Converted of the converted image at conv against the
// source at src, and returns the differences it reported.
func checkRefs(t *testing.T, conv, src string) ([]string, *check.Result) {
	t.Helper()
	diffs, res, err := runCheck(t, conv, src, 0)
	if err != nil {
		t.Fatalf("check %s against %s: %v", conv, src, err)
	}
	return diffs, res
}

// runCheck runs check.Converted of conv against src (MaxLayerSize max),
// with the differences it reported; that it counts as many is checked.
func runCheck(t testing.TB, conv, src string, max int64) ([]string, *check.Result, error) {
	t.Helper()
	get := func(s string) *oci.Artifact {
		r, err := oci.ParseRef(s, false)
		must(t, err)
		a, err := oci.Get(context.Background(), r, oci.Remote{})
		must(t, err)
		return a
	}
	var diffs []string
	res, err := check.Converted(context.Background(), get(conv), get(src), check.Options{
		TempDir:      t.TempDir(),
		Report:       func(s string) { diffs = append(diffs, s) },
		MaxLayerSize: max,
	})
	if err == nil && len(diffs) != res.Differences {
		t.Errorf("%d differences counted, %d reported", res.Differences, len(diffs))
	}
	return diffs, res, err
}

// TestCheck: the images convert makes, stacked and flattened, of the layer
// sets that make stacking hard (hard links, whiteouts, opaque directories,
// directories implied over declared ones, deleted and made again), match
// their sources as Check reads both; and what Check must catch, it does.
func TestCheck(t *testing.T) {
	reg := sharedRegistry(t)
	for _, tc := range append([]stackCase{
		{"test image", convtest.TestImageLayers(t)},
		{"edge cases", flattenEdgeLayers(t)},
		{"deleted and made again", restackLayers(t)},
	}, stackEdgeCases(t)...) {
		t.Run(tc.name, func(t *testing.T) {
			repo := uniq("e2e/check")
			srcRef := ref(t, reg.host, repo+":v1")
			pushImage(t, srcRef, convtest.Image(t, "amd64", tc.layers...))
			for _, opt := range []convert.ImageOptions{{}, {Flatten: true}, {LayerZstd: true}} {
				target := reg.host + "/" + repo + ":erofs"
				if opt.Flatten {
					target += "-flat"
				}
				if opt.LayerZstd {
					target += "-zstd"
				}
				mustConvert(t, srcRef.String(), target, opt, oci.Remote{})
				diffs, res := checkRefs(t, target, srcRef.String())
				if len(diffs) > 0 {
					t.Errorf("%s: %d differences:\n%s", target, len(diffs), strings.Join(diffs, "\n"))
				}
				wantLayers := len(tc.layers)
				if opt.Flatten {
					wantLayers = 1
				}
				if res.Images != 1 || res.Layers != wantLayers || res.Paths < 3 {
					t.Errorf("%s: compared %d images, %d layers, %d paths", target, res.Images, res.Layers, res.Paths)
				}
			}
		})
	}

	// Hard links to lower layers' files: only flattened, the conversion
	// takes them.
	t.Run("links to lower layers", func(t *testing.T) {
		repo := uniq("e2e/check-links")
		srcRef := ref(t, reg.host, repo+":v1")
		pushImage(t, srcRef, convtest.Image(t, "amd64",
			convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("t", 0o644, []byte("t\n")), convtest.File("z", 0o600, []byte("z\n"))),
			convtest.Layer(t, convtest.Hardlink("ht", "t"), convtest.Hardlink("hz", "z")),
			convtest.Layer(t, convtest.File("t", 0o644, []byte("new t\n")), convtest.Whiteout("z"))))
		target := reg.host + "/" + repo + ":flat"
		mustConvert(t, srcRef.String(), target, convert.ImageOptions{Flatten: true}, oci.Remote{})
		if diffs, res := checkRefs(t, target, srcRef.String()); len(diffs) > 0 || res.Paths < 4 {
			t.Errorf("%d paths, differences:\n%s", res.Paths, strings.Join(diffs, "\n"))
		}
	})

	// What Check must catch, in images made from a good conversion.
	repo := uniq("e2e/check-bad")
	srcRef := ref(t, reg.host, repo+":v1")
	layers := flattenEdgeLayers(t)
	src := convtest.Image(t, "amd64", layers...)
	pushImage(t, srcRef, src)
	good := reg.host + "/" + repo + ":erofs"
	mustConvert(t, srcRef.String(), good, convert.ImageOptions{}, oci.Remote{})
	conv, _ := remoteImage(t, ref(t, reg.host, repo+":erofs"))
	cl, err := conv.Layers()
	must(t, err)
	m, err := conv.Manifest()
	must(t, err)
	cfg, err := conv.ConfigFile()
	must(t, err)
	push := func(tag string, img v1.Image) string {
		pushImage(t, ref(t, reg.host, repo+":"+tag), img)
		return reg.host + "/" + repo + ":" + tag
	}
	// Layers 2 and 3 swapped, with their diff_ids and annotations: every
	// layer says the right things of itself, but the trees are wrong.
	swapped, err := mutate.Append(empty.Image,
		mutate.Addendum{Layer: cl[0], Annotations: m.Layers[0].Annotations, MediaType: m.Layers[0].MediaType},
		mutate.Addendum{Layer: cl[2], Annotations: m.Layers[1].Annotations, MediaType: m.Layers[2].MediaType},
		mutate.Addendum{Layer: cl[1], Annotations: m.Layers[2].Annotations, MediaType: m.Layers[1].MediaType})
	must(t, err)
	swappedCfg := cfg.DeepCopy()
	swappedCfg.RootFS.DiffIDs[1], swappedCfg.RootFS.DiffIDs[2] = swappedCfg.RootFS.DiffIDs[2], swappedCfg.RootFS.DiffIDs[1]
	swapped, err = mutate.ConfigFile(swapped, swappedCfg)
	must(t, err)
	swapped = mutate.Annotations(swapped, m.Annotations).(v1.Image)
	swapped = mutate.MediaType(swapped, types.OCIManifestSchema1)

	// A config whose entrypoint changed, and whose diff_id of layer 1 is
	// layer 2's.
	badCfg := cfg.DeepCopy()
	badCfg.Config.Entrypoint = []string{"/bin/false"}
	badCfg.RootFS.DiffIDs[0] = badCfg.RootFS.DiffIDs[1]
	badConfig, err := mutate.ConfigFile(conv, badCfg)
	must(t, err)

	// The source annotation of another image.
	other, err := name.NewDigest(srcRef.Context().String() + "@sha256:" + strings.Repeat("ab", 32))
	must(t, err)
	renamed := mutate.Annotations(conv, map[string]string{convert.AnnotationSourceManifest: other.DigestStr()}).(v1.Image)

	for _, tc := range []struct {
		name, target string
		want         []string
	}{
		{"layers swapped", push("swapped", swapped), []string{
			": layer 2: only in source: a/new", ": layer 3: only in source: etc/more"}},
		{"config", push("badcfg", badConfig), []string{
			`: config: config: source {`, `"Entrypoint":["/bin/false"]`,
			": layer 1: the raw image's digest is sha256:"}},
		{"source annotation", push("renamed", renamed), []string{
			`: names its source "` + other.DigestStr() + `", not sha256:`}},
	} {
		diffs, _ := checkRefs(t, tc.target, srcRef.String())
		all := strings.Join(diffs, "\n")
		for _, w := range tc.want {
			if !strings.Contains(all, w) {
				t.Errorf("%s: no difference with %q among:\n%s", tc.name, w, all)
			}
		}
	}

	// An index of two platforms, one of them converted; the converted
	// index against its source.
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: src, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: convtest.Image(t, "arm64", layers[:2]...), Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	idxRef := ref(t, reg.host, repo+":index")
	pushIndex(t, idxRef, idx)
	mustConvert(t, idxRef.String(), reg.host+"/"+repo+":index-erofs", convert.ImageOptions{}, oci.Remote{})
	diffs, res := checkRefs(t, reg.host+"/"+repo+":index-erofs", idxRef.String())
	if len(diffs) > 0 || res.Images != 2 || res.Layers != 5 {
		t.Errorf("index: %d images, %d layers, differences:\n%s", res.Images, res.Layers, strings.Join(diffs, "\n"))
	}
	// The converted image against the index: not what it was made from.
	diffs, _ = checkRefs(t, good, idxRef.String())
	if len(diffs) != 1 || !strings.Contains(diffs[0], "an image, and the source") {
		t.Errorf("an image against an index: %q", diffs)
	}
}

// TestCheckMaxLayerSize: with MaxLayerSize, Check refuses a source layer
// whose tar is larger, and a zstd-compressed converted layer whose raw
// image is (here a flattened one of two source layers within the bound),
// naming it; an uncompressed EROFS blob is not bounded.
func TestCheckMaxLayerSize(t *testing.T) {
	reg := sharedRegistry(t)
	repo := uniq("e2e/check-max")
	srcRef := ref(t, reg.host, repo+":v1")
	pushImage(t, srcRef, convtest.Image(t, "amd64",
		convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("a", 0o644, convtest.RandomBytes(31, 600<<10))),
		convtest.Layer(t, convtest.File("b", 0o644, convtest.RandomBytes(32, 600<<10)))))
	stacked, flat, flatRaw := reg.host+"/"+repo+":erofs", reg.host+"/"+repo+":flat", reg.host+"/"+repo+":flat-raw"
	mustConvert(t, srcRef.String(), stacked, convert.ImageOptions{LayerZstd: true}, oci.Remote{})
	mustConvert(t, srcRef.String(), flat, convert.ImageOptions{Flatten: true, LayerZstd: true}, oci.Remote{})
	mustConvert(t, srcRef.String(), flatRaw, convert.ImageOptions{Flatten: true}, oci.Remote{})
	check := func(conv string, max int64) error {
		diffs, _, err := runCheck(t, conv, srcRef.String(), max)
		if len(diffs) > 0 {
			t.Errorf("check %s: differences:\n%s", conv, strings.Join(diffs, "\n"))
		}
		return err
	}
	if err := check(stacked, 1<<20); err != nil {
		t.Errorf("stacked, layers within 1 MiB: %v", err)
	}
	if err := check(flat, 1<<20); err == nil || !strings.Contains(err.Error(), "flattened layer") || !strings.Contains(err.Error(), "the raw EROFS image in the zstd blob is larger than the 1048576 bytes a layer may have") {
		t.Errorf("flattened, 1.2 MB in one layer, bound 1 MiB: %v", err)
	}
	if err := check(flatRaw, 1<<20); err != nil {
		t.Errorf("flattened, uncompressed, bound 1 MiB: %v", err)
	}
	if err := check(flat, 2<<20); err != nil {
		t.Errorf("flattened, bound 2 MiB: %v", err)
	}
	if err := check(stacked, 500<<10); err == nil || !strings.Contains(err.Error(), "layer 1: source layer sha256:") || !strings.Contains(err.Error(), "the uncompressed tar is larger than the 512000 bytes") {
		t.Errorf("stacked, bound 500 KiB: %v", err)
	}
}
