package convert_test

// The image of ocierofs itself, as a release publishes it (issue #40):
// `make image image-push` builds the release binaries and the OCI index,
// pushes it to a registry and has the release ocierofs convert it there
// into its -erofs twin. containerd, with the EROFS snapshotter and a
// mkfs.erofs that fails, pulls the twin and runs ocierofs from it.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ocierofs/ocierofs/convert"
)

func TestContainerdOcierofsImage(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the release binaries and the image with make (minutes)")
	}
	requireContainerdHost(t)
	containerdBinDir(t)
	runcBinary(t)
	if _, err := exec.LookPath("make"); err != nil {
		needTool(t, "no make")
	}
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err != nil {
		needTool(t, "no CA bundle for the image (Debian package ca-certificates)")
	}
	reg := sharedRegistry(t)
	start := time.Now()

	const version = "v0.0.0-e2e"
	dist := filepath.Join(t.TempDir(), "dist")
	repo := uniq("ocierofs/ocierofs")
	cmd := exec.Command("make", "-s", "-C", "..", "image", "image-push", "DIST="+dist, "VERSION="+version,
		"SOURCE_DATE_EPOCH=1700000000", "IMAGE_REPO="+reg.host+"/"+repo, "IMAGE_PUSH_FLAGS=--plain-http")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make image image-push: %v\n%s", err, out)
	}
	t.Logf("make image image-push: %.1fs", time.Since(start).Seconds())

	// What the layout holds is what the registry got: the index, and the
	// twin converted there is the twin converted from the layout.
	layoutTags := map[string]v1.Hash{}
	raw, err := os.ReadFile(filepath.Join(dist, "image", "index.json"))
	must(t, err)
	var lim v1.IndexManifest
	must(t, json.Unmarshal(raw, &lim))
	for _, d := range lim.Manifests {
		layoutTags[d.Annotations["org.opencontainers.image.ref.name"]] = d.Digest
	}
	for _, tag := range []string{version, version + "-erofs"} {
		r := ref(t, reg.host, repo+":"+tag)
		d, err := remote.Get(r, direct()...)
		if err != nil {
			t.Fatalf("get %s: %v", r, err)
		}
		if !d.MediaType.IsIndex() {
			t.Errorf("%s is a %s, want an index", r, d.MediaType)
		}
		if d.Digest != layoutTags[tag] {
			t.Errorf("%s is %s in the registry, %s in the layout of make image", r, d.Digest, layoutTags[tag])
		}
	}

	twinRef := ref(t, reg.host, repo+":"+version+"-erofs")
	d, err := remote.Get(twinRef, direct()...)
	must(t, err)
	twin, err := d.ImageIndex()
	must(t, err)
	im, err := twin.IndexManifest()
	must(t, err)
	var host v1.Image
	var arches []string
	for _, m := range im.Manifests {
		if m.Platform == nil || !slices.Equal(m.Platform.OSFeatures, []string{"erofs"}) || m.Platform.OS != "linux" {
			t.Errorf("twin entry %s: platform %+v, want linux with os.features [erofs]", m.Digest, m.Platform)
			continue
		}
		arches = append(arches, m.Platform.Architecture)
		if m.Platform.Architecture == runtime.GOARCH {
			host, err = twin.Image(m.Digest)
			must(t, err)
		}
	}
	slices.Sort(arches)
	if !slices.Equal(arches, []string{"amd64", "arm64"}) {
		t.Errorf("twin platforms %v, want amd64 and arm64", arches)
	}
	if host == nil {
		t.Fatalf("the twin has no linux/%s image", runtime.GOARCH)
	}
	checkLayerTypes(t, host, convert.MediaTypeLayer)
	cf, err := host.ConfigFile()
	must(t, err)
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/ocierofs"}) {
		t.Errorf("twin config: user %q, entrypoint %q", cf.Config.User, cf.Config.Entrypoint)
	}

	c := startContainerd(t, ctrdOptions{})
	platform := "linux(+erofs)/" + runtime.GOARCH
	const ns = "selfimage"
	c.pull(t, ns, twinRef.String(), "--platform", platform)
	c.requireUnpacked(t, ns, host)

	run := func(args ...string) (stdout, stderr string, err error) {
		id := "ocierofs-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		full := append([]string{"run", "--rm", "--snapshotter", "erofs", "--platform", platform, twinRef.String(), id}, args...)
		return c.ctrStreams(ns, full...)
	}
	mustRun := func(args ...string) string {
		t.Helper()
		out, stderr, err := run(args...)
		if err != nil {
			t.Fatalf("ctr run %s %s: %v\nstdout:\n%s\nstderr:\n%s\ncontainerd log:\n%s", twinRef, strings.Join(args, " "), err, out, stderr, c.logTail(40))
		}
		return out
	}
	// ctr run with arguments replaces the entrypoint too: name the programs.
	for _, prog := range []string{"ocierofs", "ocierofs-mirror"} {
		out := mustRun("/usr/local/bin/"+prog, "version")
		want := prog + " version " + version + " (" + runtime.Version() + " linux/" + runtime.GOARCH + ")\n"
		if out != want {
			t.Errorf("%s version in the container printed %q, want %q", prog, out, want)
		}
	}
	// Without arguments the entrypoint runs: ocierofs, which prints its help.
	if out := mustRun(); !strings.Contains(out, "mkfs") || !strings.Contains(out, "convert") {
		t.Errorf("the entrypoint printed:\n%s\nwant ocierofs's help", out)
	}
	// The image's user is not root: it may write its home, not /root.
	mustRun("/usr/local/bin/ocierofs", "mkfs", "/home/ocierofs/certs.erofs", "/etc/ssl")
	if out, stderr, err := run("/usr/local/bin/ocierofs", "mkfs", "/root/certs.erofs", "/etc/ssl"); err == nil || !strings.Contains(out+stderr, "permission denied") {
		t.Errorf("ocierofs mkfs /root/certs.erofs in the container: %v, want permission denied\n%s%s", err, out, stderr)
	}
	c.requireNoMkfs(t)
	t.Logf("TestContainerdOcierofsImage: %.1fs", time.Since(start).Seconds())
}
