package convert_test

// End-to-end tests with the real consumer: containerd 2.4 (its EROFS
// snapshotter and differ, started by the test with a root, state and
// sockets of its own, see containerd_helpers_test.go) pulls what the
// ocierofs CLI made from a real registry on 127.0.0.1 and runs containers
// of it with runc. The only mkfs.erofs containerd can find is a stand-in
// that fails and records every call: a layer containerd converted itself
// would show there.
//
// What these tests found out about containerd 2.4.2 (and rely on):
//
//   - An image whose index entries carry platform.os.features ["erofs"]
//     (what `ocierofs convert` makes of an index) is selected only when the
//     client asks for that feature: `--platform 'linux(+erofs)/amd64'` on
//     both `ctr image pull` and `ctr run`. --snapshotter erofs alone does
//     not add it; a plain linux/amd64 pull fetches none of its layers, and
//     ctr run answers "no match for platform in manifest".
//   - In an index that lists the tar manifest and the EROFS manifest of the
//     same platform, the client-side pull (ctr image pull --local) and
//     ctr run pick the EROFS manifest: among the manifests that match the
//     requested platform, the one with more os.features wins. The transfer
//     service's pull (ctr image pull without --local) unpacks every
//     manifest that matches, the tar one too, which runs mkfs.erofs.
//   - A single EROFS manifest (no index) needs no platform at all.

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/cache"
	"github.com/ocierofs/ocierofs/convert/dmverity"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
)

// erofsPlatform is how ctr is told to want the EROFS variant of an index
// (containerd/platforms syntax: OS features in parentheses after a '+').
const erofsPlatform = "linux(+erofs)/amd64"

// The labels containerd's EROFS snapshotter records on a snapshot whose
// layer blob it did not write itself (plugins/snapshots/erofs/blobsource.go).
const (
	labelBlobSource = "io.containerd.erofs.v1/blob.source"
	labelBlobRef    = "io.containerd.erofs.v1/blob.ref"
)

// cliReport is what `ocierofs convert -o json` prints.
type cliReport struct {
	Source string `json:"source"`
	Target string `json:"target"`
	Digest string `json:"digest"`
	Index  bool   `json:"index"`
}

// convertCLI runs `ocierofs convert --plain-http -o json ARGS…`.
func convertCLI(t testing.TB, bin string, args ...string) cliReport {
	t.Helper()
	out := runOcierofs(t, bin, append([]string{"convert", "--plain-http", "-o", "json", "--jobs", "2"}, args...)...)
	var rep cliReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("ocierofs convert -o json: %v\n%s", err, out)
	}
	return rep
}

// converted reads the image the CLI published at rep.Target, checks that
// its manifest is rep.Digest and that every layer has media type mt, and
// returns it.
func converted(t testing.TB, rep cliReport, mt types.MediaType) v1.Image {
	t.Helper()
	r, err := name.ParseReference(rep.Target)
	must(t, err)
	img, d := remoteImage(t, r)
	if d.Digest.String() != rep.Digest {
		t.Errorf("%s is %s, the report says %s", r, d.Digest, rep.Digest)
	}
	checkLayerTypes(t, img, mt)
	return img
}

func checkLayerTypes(t testing.TB, img v1.Image, mt types.MediaType) {
	t.Helper()
	m, err := img.Manifest()
	must(t, err)
	for i, l := range m.Layers {
		if l.MediaType != mt {
			t.Errorf("layer %d: media type %s, want %s", i, l.MediaType, mt)
		}
	}
	cf, err := img.ConfigFile()
	must(t, err)
	if !slices.Contains(cf.OSFeatures, "erofs") {
		t.Errorf("config os.features %q lacks erofs", cf.OSFeatures)
	}
}

// diffIDs is the config's rootfs.diff_ids of img.
func diffIDs(t testing.TB, img v1.Image) []v1.Hash {
	t.Helper()
	cf, err := img.ConfigFile()
	must(t, err)
	return cf.RootFS.DiffIDs
}

// pull runs ctr image pull --snapshotter erofs of a plain-http reference.
func (c *ctrd) pull(t testing.TB, ns, ref string, extra ...string) {
	t.Helper()
	start := time.Now()
	args := append([]string{"image", "pull", "--plain-http", "--snapshotter", "erofs"}, extra...)
	c.ctr(t, ns, append(args, ref)...)
	t.Logf("ctr image pull %s %s: %.2fs", strings.Join(extra, " "), ref, time.Since(start).Seconds())
}

// requireUnpacked checks that containerd unpacked exactly the layers of
// img, the EROFS image ocierofs made: a committed snapshot for each chain
// of its diff_ids, parented as the layers stack, and for each layer a
// snapshots/ID/layer.erofs that hashes to its diff_id, that is the raw
// EROFS image ocierofs wrote, taken by the differ as it is (raw) or
// merely decompressed (+zstd). Nothing converted on the node.
func (c *ctrd) requireUnpacked(t testing.TB, ns string, img v1.Image) {
	t.Helper()
	ids := diffIDs(t, img)
	chain := chainIDs(ids)
	for i, key := range chain {
		si := c.snapshot(t, ns, key)
		if si.Kind != "Committed" {
			t.Errorf("snapshot %d %s: kind %s, want Committed", i, key, si.Kind)
		}
		want := ""
		if i > 0 {
			want = chain[i-1]
		}
		if si.Parent != want {
			t.Errorf("snapshot %d %s: parent %q, want %q", i, key, si.Parent, want)
		}
		if src := si.Labels[labelBlobSource]; src != "" {
			t.Errorf("snapshot %d: %s = %q: its blob is not the one the differ wrote", i, labelBlobSource, src)
		}
	}
	blobs := c.erofsLayerBlobs(t)
	var got []string
	for _, h := range blobs {
		got = append(got, h)
	}
	var want []string
	for _, d := range ids {
		want = append(want, d.String())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the EROFS snapshotter holds layer blobs\n%v\nwant one per diff_id of the converted image\n%v\n(%v)", got, want, blobs)
	}
	c.requireNoMkfs(t)
}

// pushRunnable pushes runnableImage to a repository of its own.
func pushRunnable(t testing.TB, host, repo string) (v1.Image, name.Reference) {
	t.Helper()
	src := runnableImage(t, "amd64")
	r := ref(t, host, uniq(repo)+":v1")
	pushImage(t, r, src)
	return src, r
}

func TestContainerdE2E(t *testing.T) {
	start := time.Now()
	requireContainerdHost(t)
	containerdBinDir(t)
	runcBinary(t)
	reg := sharedRegistry(t)
	bin := ocierofsCLI(t)

	// busybox, then the four layers of convtest.TestImageLayers: whiteouts (a file,
	// a symlink, a directory tree), an opaque directory, hard links,
	// user.* and security.capability xattrs, setuid and setgid files, and
	// directories implied by a layer that takes their metadata from below.
	src, srcRef := pushRunnable(t, reg.host, "ctrd/e2e")

	t.Run("image", func(t *testing.T) {
		start := time.Now()
		rep := convertCLI(t, bin, srcRef.String())
		if want := srcRef.Context().Tag("v1-erofs").String(); rep.Target != want || rep.Index {
			t.Errorf("converted to %s (index %v), want the default target %s, an image", rep.Target, rep.Index, want)
		}
		img := converted(t, rep, convert.MediaTypeLayer)
		c := startContainerd(t, ctrdOptions{})
		c.pull(t, "e2e", rep.Target)
		c.requireUnpacked(t, "e2e", img)
		c.runContainer(t, "e2e", rep.Target)
		c.inspectRunning(t, "e2e", rep.Target, src)
		c.requireNoMkfs(t)
		t.Logf("image: %.2fs", time.Since(start).Seconds())
	})

	t.Run("index", func(t *testing.T) {
		start := time.Now()
		// The source is an index of a runnable linux/amd64 image and a
		// linux/arm64 one; the converted index has an EROFS manifest for
		// each, platform.os.features ["erofs"].
		arm := convtest.Image(t, "arm64", convtest.Layer(t, convtest.Dir(".", 0o755), convtest.Dir("bin", 0o755),
			convtest.File("bin/arch", 0o755, []byte("aarch64\n"))))
		idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		idx = mutate.AppendManifests(idx,
			mutate.IndexAddendum{Add: src, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
			mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}}},
		)
		idxRef := ref(t, reg.host, uniq("ctrd/e2e-index")+":v1")
		pushIndex(t, idxRef, idx)
		rep := convertCLI(t, bin, idxRef.String())
		if !rep.Index {
			t.Fatalf("%s: the conversion of an index is not an index", rep.Target)
		}
		r, err := name.ParseReference(rep.Target)
		must(t, err)
		d, err := remote.Get(r, direct()...)
		must(t, err)
		if d.Digest.String() != rep.Digest || !d.MediaType.IsIndex() {
			t.Fatalf("%s is %s %s, the report says %s, an index", r, d.MediaType, d.Digest, rep.Digest)
		}
		cidx, err := d.ImageIndex()
		must(t, err)
		im, err := cidx.IndexManifest()
		must(t, err)
		var amdDesc *v1.Descriptor
		for i, m := range im.Manifests {
			if m.Platform == nil || !slices.Equal(m.Platform.OSFeatures, []string{"erofs"}) {
				t.Errorf("converted index entry %d: platform %+v, want os.features [erofs]", i, m.Platform)
			}
			if m.Platform != nil && m.Platform.Architecture == "amd64" {
				amdDesc = &im.Manifests[i]
			}
		}
		if len(im.Manifests) != 2 || amdDesc == nil {
			t.Fatalf("converted index %+v: want 2 manifests, one linux/amd64", im.Manifests)
		}
		amd, err := cidx.Image(amdDesc.Digest)
		must(t, err)
		checkLayerTypes(t, amd, convert.MediaTypeLayer)

		c := startContainerd(t, ctrdOptions{})
		c.pull(t, "index", rep.Target, "--platform", erofsPlatform)
		c.requireUnpacked(t, "index", amd)
		c.runContainer(t, "index", rep.Target, "--platform", erofsPlatform)
		c.inspectRunning(t, "index", rep.Target, src, "--platform", erofsPlatform)

		// An index that offers both forms for linux/amd64, the tar
		// manifest first (as the draft EROFS image spec wants): asked for
		// linux(+erofs)/amd64, the client picks the EROFS manifest, the
		// one with more matching os.features, and unpacks it with no
		// mkfs.erofs. (ctr's default pull goes through the transfer
		// service, which unpacks every matching manifest, hence --local.)
		mixed := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
		mixed = mutate.AppendManifests(mixed,
			mutate.IndexAddendum{Add: src, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
			mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: amdDesc.Platform}},
		)
		mixedRef := idxRef.Context().Tag("mixed")
		pushIndex(t, mixedRef, mixed)
		c.pull(t, "mixed", mixedRef.String(), "--local", "--platform", erofsPlatform)
		for _, key := range chainIDs(diffIDs(t, amd)) {
			c.snapshot(t, "mixed", key) // fails the test if absent
		}
		if _, err := c.ctrErr("mixed", "snapshots", "--snapshotter", "erofs", "info", chainIDs(diffIDs(t, src))[0]); err == nil {
			t.Errorf("the tar manifest of the mixed index was unpacked too")
		}
		c.requireNoMkfs(t)
		c.runContainer(t, "mixed", mixedRef.String(), "--platform", erofsPlatform)
		c.requireNoMkfs(t)
		t.Logf("index: %.2fs", time.Since(start).Seconds())
	})

	t.Run("zstd", func(t *testing.T) {
		start := time.Now()
		rep := convertCLI(t, bin, "--layer-compression", "zstd", srcRef.String(), srcRef.Context().Tag("v1-erofs-zstd").String())
		img := converted(t, rep, convert.MediaTypeLayerZstd)
		c := startContainerd(t, ctrdOptions{})
		c.pull(t, "zstd", rep.Target)
		c.requireUnpacked(t, "zstd", img)
		c.runContainer(t, "zstd", rep.Target)
		c.inspectRunning(t, "zstd", rep.Target, src)
		c.requireNoMkfs(t)
		t.Logf("zstd: %.2fs", time.Since(start).Seconds())
	})
	t.Logf("TestContainerdE2E: %.2fs wall", time.Since(start).Seconds())
}

// cacheReport is what `ocierofs cache -o json` prints.
type cacheReport struct {
	Layers []cache.Layer `json:"layers"`
}

func TestContainerdLayerContentCache(t *testing.T) {
	start := time.Now()
	requireContainerdHost(t)
	containerdBinDir(t)
	runcBinary(t)
	reg := sharedRegistry(t)
	bin := ocierofsCLI(t)
	src, srcRef := pushRunnable(t, reg.host, "ctrd/cache")
	ids := diffIDs(t, src)

	// The node is prepared from the ORIGINAL tar image; nothing else of
	// ocierofs is published.
	dir := filepath.Join(t.TempDir(), "layer-cache")
	// --over-lower: the directories layers imply keep their lower
	// layers' metadata, as umoci's unpacking (docker's) has them.
	out := runOcierofs(t, bin, "cache", "--over-lower", "--plain-http", "-o", "json", "--jobs", "2", srcRef.String(), dir)
	var rep cacheReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("ocierofs cache -o json: %v\n%s", err, out)
	}
	if len(rep.Layers) != len(ids) {
		t.Fatalf("ocierofs cache reported %d layers, the image has %d", len(rep.Layers), len(ids))
	}
	for i, l := range rep.Layers {
		want := cache.Path(dir, ids[i])
		if l.Path != want || l.Skipped != "" {
			t.Errorf("layer %d: cache entry %q (skipped %q), want %s", i, l.Path, l.Skipped, want)
		}
		if fi, err := os.Stat(want); err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
			t.Errorf("layer %d: %s: %v", i, want, err)
		}
	}

	c := startContainerd(t, ctrdOptions{layerContentCaches: []string{dir}})
	c.pull(t, "cache", srcRef.String())
	chain := chainIDs(ids)
	for i, key := range chain {
		si := c.snapshot(t, "cache", key)
		if si.Kind != "Committed" {
			t.Errorf("snapshot %d %s: kind %s, want Committed", i, key, si.Kind)
		}
		if got := si.Labels[labelBlobSource]; got != "cache" {
			t.Errorf("layer %d (%s): snapshot label %s = %q, want cache; labels %v", i, ids[i], labelBlobSource, got, si.Labels)
		}
		if got, want := si.Labels[labelBlobRef], cache.Path(dir, ids[i]); got != want {
			t.Errorf("layer %d: snapshot label %s = %q, want %s", i, labelBlobRef, got, want)
		}
	}
	// A cached layer has no blob of its own in the snapshot directory.
	if blobs := c.erofsLayerBlobs(t); len(blobs) != 0 {
		t.Errorf("layer blobs in the snapshotter's own directory, though every layer is in the cache: %v", blobs)
	}
	c.requireNoMkfs(t)
	c.runContainer(t, "cache", srcRef.String())
	c.inspectRunning(t, "cache", srcRef.String(), src)
	c.requireNoMkfs(t)

	// With --dmverity each entry has a tree and a sidecar. containerd
	// opens the entry in the cache, at each mount, through dm-verity with
	// the root hash of the sidecar beside it, where the kernel has
	// dm-verity (dmverity_mode "on" requires it); elsewhere its default
	// ("auto") refuses to mount an entry that has a sidecar.
	vdir := filepath.Join(t.TempDir(), "layer-cache-dmverity")
	out = runOcierofs(t, bin, "cache", "--over-lower", "--plain-http", "--dmverity", "-o", "json", srcRef.String(), vdir)
	rep = cacheReport{}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("ocierofs cache --dmverity -o json: %v\n%s", err, out)
	}
	for i, l := range rep.Layers {
		m, err := dmverity.ReadSidecar(l.Path)
		if err != nil || l.DMVerityRootHash != m.RootHash {
			t.Errorf("layer %d: sidecar %+v (%v), reported root hash %q", i, m, err, l.DMVerityRootHash)
		}
	}
	if _, err := os.Stat("/sys/module/dm_verity"); err == nil {
		v := startContainerd(t, ctrdOptions{layerContentCaches: []string{vdir}, dmverityMode: "on"})
		v.pull(t, "verity", srcRef.String())
		v.runContainer(t, "verity", srcRef.String())
		v.inspectRunning(t, "verity", srcRef.String(), src)
		v.requireNoMkfs(t)
	} else {
		t.Log("no dm-verity in this kernel (/sys/module/dm_verity): containerd cannot open the entries through it here; checking that it reads the sidecars, and runs the entries without dm-verity")
		v := startContainerd(t, ctrdOptions{layerContentCaches: []string{vdir}})
		v.pull(t, "verity", srcRef.String())
		outRun, err := v.ctrErr("verity", "run", "--rm", "--snapshotter", "erofs", srcRef.String(), "verity-refused", "/bb/sh", "-c", "true")
		if err == nil || !strings.Contains(outRun, "requires dm-verity") {
			t.Errorf("containerd (dmverity_mode auto), on a kernel without dm-verity, did not refuse to mount entries with sidecars: %v\n%s", err, outRun)
		} else {
			t.Logf("containerd, as it should: %s", outRun[max(0, strings.Index(outRun, "requires dm-verity")-40):])
		}
		off := startContainerd(t, ctrdOptions{layerContentCaches: []string{vdir}, dmverityMode: "off"})
		off.pull(t, "verity", srcRef.String())
		off.runContainer(t, "verity", srcRef.String())
		off.inspectRunning(t, "verity", srcRef.String(), src)
		off.requireNoMkfs(t)
	}
	t.Logf("TestContainerdLayerContentCache: %.2fs wall", time.Since(start).Seconds())
}

// TestContainerdMkfsErofs has containerd convert tar layers on the node
// with ocierofs as its mkfs.erofs (a link of that name): its EROFS differ
// pipes each layer's tar to `mkfs.erofs --tar=f --aufs --quiet
// -Enoinline_data … -U UUID LAYER`, or with enable_tar_index writes an
// index with --tar=i and appends the tar itself; with only the walking
// differ, the snapshotter commits each unpacked upper directory with
// `mkfs.erofs --quiet -Enoinline_data LAYER DIR`. Each way, a container
// of the image runs and its root is the image's (umoci's unpack).
func TestContainerdMkfsErofs(t *testing.T) {
	requireContainerdHost(t)
	containerdBinDir(t)
	runcBinary(t)
	reg := sharedRegistry(t)
	bin, err := filepath.Abs(ocierofsCLI(t))
	must(t, err)
	// The image's layers list the directories above their entries, as
	// docker build and BuildKit write them: each layer is converted on
	// its own here, and a directory it only implies could but take
	// default metadata, hiding what the layers below give it.
	layers := listParents(t, append([]v1.Layer{busyboxLayer(t)}, convtest.TestImageLayers(t)...))
	src := runnableImageOf(t, "amd64", layers)
	srcRef := ref(t, reg.host, uniq("ctrd/mkfs")+":v1")
	pushImage(t, srcRef, src)

	for _, tc := range []struct {
		name string
		opt  ctrdOptions
		want []string // in every call
	}{
		{"tar", ctrdOptions{mkfsOptions: []string{"-T0", "--mkfs-time", "--sort=none"}},
			[]string{"--tar=f --aufs --quiet -Enoinline_data -b4096 -T0 --mkfs-time --sort=none -U "}},
		{"tar-lz4hc", ctrdOptions{mkfsOptions: []string{"-zlz4hc,12", "-C65536", "-Eztailpacking"}},
			[]string{"--tar=f --aufs --quiet -Enoinline_data -b4096 -zlz4hc,12 -C65536 -Eztailpacking -U "}},
		{"tar-index", ctrdOptions{tarIndex: true}, []string{"--tar=i --aufs --quiet -b4096 -U "}},
		{"walking", ctrdOptions{differs: []string{"walking"}}, []string{"--quiet -Enoinline_data "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			opt := tc.opt
			opt.mkfs = bin
			c := startContainerd(t, opt)
			c.pull(t, "mkfs", srcRef.String())
			var calls []string
			for _, call := range strings.Split(strings.TrimSpace(c.mkfsCallsSoFar()), "\n") {
				if call != "--help" { // the differ's probe for --tar=
					calls = append(calls, call)
				}
			}
			if len(calls) != len(layers) {
				t.Errorf("containerd ran mkfs.erofs %d times, want once per layer (%d):\n%s", len(calls), len(layers), strings.Join(calls, "\n"))
			}
			for _, call := range calls {
				for _, w := range tc.want {
					if !strings.Contains(call, w) {
						t.Errorf("mkfs.erofs %s: want %q in it", call, w)
					}
				}
			}
			for i, key := range chainIDs(diffIDs(t, src)) {
				if si := c.snapshot(t, "mkfs", key); si.Kind != "Committed" {
					t.Errorf("snapshot %d %s: kind %s, want Committed", i, key, si.Kind)
				}
			}
			// The layer images as the kernel stacks them, bottom first
			// (the snapshotter numbers its snapshots as it makes them).
			var files []string
			for f := range c.erofsLayerBlobs(t) {
				files = append(files, f)
			}
			snapID := func(f string) int {
				n, err := strconv.Atoi(filepath.Base(filepath.Dir(f)))
				must(t, err)
				return n
			}
			slices.SortFunc(files, func(a, b string) int { return snapID(a) - snapID(b) })
			if len(files) != len(layers) {
				t.Fatalf("%d layer.erofs files, want %d: %v", len(files), len(layers), files)
			}
			compareRootfs(t, "the layer images stacked", convtest.MountStack(t, files), src)
			if tc.opt.tarIndex {
				// ctr run reads the image's /etc/passwd and /etc/group
				// through go-erofs first, which refuses an image with a
				// device table opened without its devices ("extra
				// devices count 1 does not match provided 0"): the
				// [index][tar] layers mkfs.erofs 1.9.3 writes have one
				// too. containerd 2.4.2 cannot run them; the kernel
				// mounts them, as above.
				t.Logf("%s: no container: containerd %s's fsview cannot open tar-index layers", tc.name, containerdVersion)
				return
			}
			c.runContainer(t, "mkfs", srcRef.String())
			c.inspectRunning(t, "mkfs", srcRef.String(), src)
			t.Logf("%s: %.2fs", tc.name, time.Since(start).Seconds())
		})
	}

	// containerd's own converter, on the client: ctr runs mkfs.erofs
	// (--tar=f … -zlz4hc -C 65536 …) for each layer of an image it has
	// pulled, and containerd then runs the converted image with no
	// mkfs.erofs of its own (the stand-in would fail).
	t.Run("ctr convert", func(t *testing.T) {
		c := startContainerd(t, ctrdOptions{})
		c.ctrPath = t.TempDir()
		calls := filepath.Join(c.ctrPath, "calls")
		ocierofsAsMkfs(t, c.ctrPath, bin, calls)
		// Pulled with the default snapshotter, overlayfs: no mkfs.erofs.
		c.ctr(t, "conv", "image", "pull", "--plain-http", srcRef.String())
		dst := srcRef.Context().Tag("ctr-erofs").String()
		c.ctr(t, "conv", "image", "convert", "--oci", "--erofs", "raw", "--erofs-compressors", "lz4hc", srcRef.String(), dst)
		got, err := os.ReadFile(calls)
		must(t, err)
		if n := strings.Count(string(got), "--tar=f --aufs --quiet -Enoinline_data"); n != len(layers) || !strings.Contains(string(got), "-zlz4hc") {
			t.Errorf("ctr ran mkfs.erofs %d times for %d layers, with lz4hc:\n%s", n, len(layers), got)
		}
		c.runContainer(t, "conv", dst)
		c.inspectRunning(t, "conv", dst, src)
		c.requireNoMkfs(t)
	})
}

// listParents rewrites layers as docker build and BuildKit write them:
// each lists every directory above its entries (and above its whiteouts),
// with the metadata the layers below give it. The layers of convtest.TestImageLayers
// leave some out on purpose, for ocierofs convert, which reads the layers
// below for them; a converter that sees one layer alone cannot.
func listParents(t testing.TB, layers []v1.Layer) []v1.Layer {
	t.Helper()
	below := map[string]tar.Header{} // the directories of the layers so far
	var out []v1.Layer
	for _, l := range layers {
		rc, err := l.Compressed()
		must(t, err)
		zr, err := gzip.NewReader(rc) // convtest.Layer's
		must(t, err)
		var entries []convtest.Entry
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			must(t, err)
			data, err := io.ReadAll(tr)
			must(t, err)
			entries = append(entries, convtest.Entry{Hdr: *h, Data: data})
		}
		must(t, rc.Close())
		clean := func(name string) string { return path.Clean(strings.TrimPrefix(name, "./")) }
		listed := map[string]bool{}
		for _, e := range entries {
			if e.Hdr.Typeflag == tar.TypeDir {
				listed[clean(e.Hdr.Name)] = true
			}
		}
		var full []convtest.Entry
		for _, e := range entries {
			var parents []string
			for p := path.Dir(clean(e.Hdr.Name)); ; p = path.Dir(p) {
				parents = append([]string{p}, parents...)
				if p == "." {
					break
				}
			}
			for _, p := range parents {
				if h, ok := below[p]; ok && !listed[p] {
					h.Name = p + "/"
					full = append(full, convtest.Entry{Hdr: h})
					listed[p] = true
				}
			}
			full = append(full, e)
		}
		// What the layer leaves below the next one: whiteouts first, as
		// they apply to the layers below.
		drop := func(p string, self bool) {
			for k := range below {
				if self && k == p || p == "." && k != "." || strings.HasPrefix(k, p+"/") {
					delete(below, k)
				}
			}
		}
		for _, e := range entries {
			dir, base := path.Split(clean(e.Hdr.Name))
			switch {
			case base == ".wh..wh..opq":
				drop(path.Clean(dir), false)
			case strings.HasPrefix(base, ".wh."):
				drop(path.Join(dir, strings.TrimPrefix(base, ".wh.")), true)
			}
		}
		for _, e := range entries {
			p := clean(e.Hdr.Name)
			if strings.HasPrefix(path.Base(p), ".wh.") {
				continue
			}
			if e.Hdr.Typeflag == tar.TypeDir {
				below[p] = e.Hdr
			} else {
				drop(p, true)
			}
		}
		out = append(out, convtest.Layer(t, full...))
	}
	return out
}
