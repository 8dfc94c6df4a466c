package convert_test

import (
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert/internal/convtest"
)

// TestContainerdMixed: convert --merge-platform turns a tag in place into
// the mixed index, and containerd 2.4 runs it both ways: asked for
// linux(+erofs)/amd64 with the EROFS snapshotter, it pulls the EROFS
// manifest only and unpacks it with no mkfs.erofs; asked for linux/amd64
// with overlayfs, the tar manifest only, none of the EROFS layers. (The
// transfer service's pull, which unpacks every manifest that matches the
// platform, unpacks both: see the end.)
func TestContainerdMixed(t *testing.T) {
	requireContainerdHost(t)
	containerdBinDir(t)
	runcBinary(t)
	reg := sharedRegistry(t)
	bin := ocierofsCLI(t)

	src := runnableImage(t, "amd64")
	arm := convtest.Image(t, "arm64", convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("arch", 0o644, []byte("aarch64\n"))))
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: src, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}}})
	r := ref(t, reg.host, uniq("ctrd/mixed")+":v1")
	pushIndex(t, r, idx)

	rep := convertCLI(t, bin, "--merge-platform", r.String())
	if rep.Target != r.String() || !rep.Index {
		t.Fatalf("converted to %s (index %v), want the source's tag %s, an index", rep.Target, rep.Index, r)
	}
	d, err := remote.Get(r, direct()...)
	must(t, err)
	mixed, err := d.ImageIndex()
	must(t, err)
	im, err := mixed.IndexManifest()
	must(t, err)
	if len(im.Manifests) != 4 {
		t.Fatalf("%d manifests, want 4: %+v", len(im.Manifests), im.Manifests)
	}
	var erofsAmd v1.Image
	for _, m := range im.Manifests[2:] {
		if m.Platform != nil && m.Platform.Architecture == "amd64" {
			erofsAmd, err = mixed.Image(m.Digest)
			must(t, err)
		}
	}
	if erofsAmd == nil {
		t.Fatalf("no EROFS linux/amd64 manifest in %+v", im.Manifests)
	}
	checkLayerTypes(t, erofsAmd, "application/vnd.erofs.layer.v1")
	erofsLayers := map[string]bool{}
	ls, err := erofsAmd.Layers()
	must(t, err)
	for _, l := range ls {
		dg, err := l.Digest()
		must(t, err)
		erofsLayers[dg.String()] = true
	}

	c := startContainerd(t, ctrdOptions{})

	// With the EROFS snapshotter: the EROFS manifest.
	c.pull(t, "erofs", r.String(), "--local", "--platform", erofsPlatform)
	for _, key := range chainIDs(diffIDs(t, erofsAmd)) {
		c.snapshot(t, "erofs", key) // fails the test if absent
	}
	if _, err := c.ctrErr("erofs", "snapshots", "--snapshotter", "erofs", "info", chainIDs(diffIDs(t, src))[0]); err == nil {
		t.Errorf("the tar manifest was unpacked too")
	}
	c.requireNoMkfs(t)
	c.runContainer(t, "erofs", r.String(), "--platform", erofsPlatform)
	c.requireNoMkfs(t)

	// With overlayfs and the default platform: the tar manifest, through
	// the transfer service.
	c.ctr(t, "tar", "image", "pull", "--plain-http", "--snapshotter", "overlayfs", "--platform", "linux/amd64", r.String())
	for _, l := range strings.Split(c.ctr(t, "tar", "content", "ls", "-q"), "\n") {
		if erofsLayers[strings.TrimSpace(l)] {
			t.Errorf("the overlayfs pull fetched EROFS layer %s", l)
		}
	}
	tarChain := chainIDs(diffIDs(t, src))
	c.ctr(t, "tar", "snapshots", "--snapshotter", "overlayfs", "info", tarChain[len(tarChain)-1])
	c.runContainer(t, "tar", r.String(), "--platform", "linux/amd64", "--snapshotter", "overlayfs")
	c.requireNoMkfs(t)

	// Through the transfer service (ctr's default pull), asked for
	// linux(+erofs)/amd64: containerd 2.4 unpacks every manifest that
	// matches, the tar one too, with mkfs.erofs (here ocierofs in its
	// place); ctr run then takes the EROFS manifest, already unpacked as
	// it is.
	ct := startContainerd(t, ctrdOptions{mkfs: bin})
	ct.pull(t, "transfer", r.String(), "--platform", erofsPlatform)
	for _, key := range chainIDs(diffIDs(t, erofsAmd)) {
		ct.snapshot(t, "transfer", key)
	}
	calls := 0
	for _, l := range strings.Split(ct.mkfsCallsSoFar(), "\n") {
		if strings.HasPrefix(l, "--tar=") {
			calls++
		}
	}
	srcLayers, err := src.Layers()
	must(t, err)
	if calls != len(srcLayers) {
		t.Errorf("%d layers converted by mkfs.erofs, want the tar manifest's %d:\n%s", calls, len(srcLayers), ct.mkfsCallsSoFar())
	}
	ct.runContainer(t, "transfer", r.String(), "--platform", erofsPlatform)
}
