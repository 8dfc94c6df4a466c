package main

// CLI-level tests of `ocierofs convert` on OCI layouts and an in-memory
// registry (the tests against a real registry, with faults and mounts, are
// in convert/image_test.go, which runs the same code path through the API).

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/oci"
)

// runCLI runs `ocierofs convert ARGS…` and returns what it wrote on stdout.
func runConvertCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	app := &cli.App{
		Name:           "ocierofs",
		Commands:       []*cli.Command{convertCommand},
		Writer:         &out,
		ErrWriter:      io.Discard,
		ExitErrHandler: func(*cli.Context, error) {},
	}
	err := app.RunContext(context.Background(), append([]string{"ocierofs", "convert"}, args...))
	return out.String(), err
}

// copyBusyboxLayout copies testdata/busybox, so that a default target (the same
// layout) does not write into the repository.
func copyBusyboxLayout(t *testing.T) string {
	t.Helper()
	src, err := filepath.Abs("../../testdata/busybox")
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "busybox")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestConvertCLIJSON(t *testing.T) {
	dir := copyBusyboxLayout(t)
	target := "oci:" + filepath.Join(t.TempDir(), "out") + ":bb"
	out, err := runConvertCLI(t, "-q", "-o", "json", "--jobs", "2", "oci:"+dir+":latest", target)
	if err != nil {
		t.Fatalf("convert: %v", err)
	}
	var rep convertReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-o json printed %q: %v", out, err)
	}
	t.Logf("testdata/busybox via the CLI: %.3fs wall, %s", rep.Seconds, rep.Digest)
	if rep.Target != target || rep.Index || len(rep.Images) != 1 || rep.Digest == "" {
		t.Fatalf("report %+v", rep)
	}
	for i, l := range rep.Images[0].Layers {
		t.Logf("  layer %d %s: convert %.3fs, %d → %d bytes", i+1, l.Source, l.ConvertSeconds, l.SourceSize, l.Size)
		if l.MediaType != string(convert.MediaTypeLayer) || l.DiffID == "" || l.DiffID != l.Digest {
			t.Errorf("layer %d: %+v", i, l)
		}
	}
	if n := len(rep.Images[0].Layers); n != 3 {
		t.Errorf("%d layers, want 3", n)
	}
	ref, err := oci.ParseRef(target, false)
	if err != nil {
		t.Fatal(err)
	}
	art, err := oci.Get(context.Background(), ref, oci.Remote{})
	if err != nil {
		t.Fatalf("open %s: %v", target, err)
	}
	if art.Descriptor.Digest.String() != rep.Digest {
		t.Errorf("layout holds %s, report says %s", art.Descriptor.Digest, rep.Digest)
	}
	cf, err := art.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if len(cf.OSFeatures) != 1 || cf.OSFeatures[0] != "erofs" {
		t.Errorf("os.features %q", cf.OSFeatures)
	}

	// Converting again gives the same image.
	out2, err := runConvertCLI(t, "-q", "-o", "json", "oci:"+dir+":latest", "oci:"+filepath.Join(t.TempDir(), "again")+":bb")
	if err != nil {
		t.Fatal(err)
	}
	var rep2 convertReport
	if err := json.Unmarshal([]byte(out2), &rep2); err != nil {
		t.Fatal(err)
	}
	if rep2.Digest != rep.Digest {
		t.Errorf("second conversion %s, first %s", rep2.Digest, rep.Digest)
	}
}

func TestConvertCLIFlags(t *testing.T) {
	dir := copyBusyboxLayout(t)
	out, err := runConvertCLI(t, "-q", "-o", "json", "--layer-compression", "zstd", "--media-type", "spec", "--referrer", "oci:"+dir+":latest")
	if err != nil {
		t.Fatalf("convert: %v", err)
	}
	var rep convertReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-o json printed %q: %v", out, err)
	}
	// Without a target: the same layout, tag + "-erofs".
	if want := "oci:" + dir + ":latest-erofs"; rep.Target != want {
		t.Errorf("target %s, want %s", rep.Target, want)
	}
	for i, l := range rep.Images[0].Layers {
		if l.MediaType != string(convert.MediaTypeSpecZstd) || l.DiffID == l.Digest {
			t.Errorf("layer %d: %+v", i, l)
		}
	}
	ref, _ := oci.ParseRef(rep.Target, false)
	art, err := oci.Get(context.Background(), ref, oci.Remote{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := art.Image.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject == nil || m.Annotations[convert.AnnotationSourceManifest] != m.Subject.Digest.String() {
		t.Errorf("subject %+v, annotations %v", m.Subject, m.Annotations)
	}

	// The output is a converted image: converting it is refused.
	_, err = runConvertCLI(t, "-q", rep.Target)
	if !errors.Is(err, oci.ErrLoop) {
		t.Errorf("converting %s: err = %v, want oci.ErrLoop", rep.Target, err)
	}
	// Whatever the suffix: its manifest names its source.
	if _, err := runConvertCLI(t, "-q", "--suffix", "-x", rep.Target, "oci:"+filepath.Join(t.TempDir(), "o")+":t"); err == nil ||
		!strings.Contains(err.Error(), "refusing to convert it again") {
		t.Errorf("with --suffix -x, converting %s: err = %v, want a refusal", rep.Target, err)
	}
}

func TestConvertCLIErrors(t *testing.T) {
	dir := copyBusyboxLayout(t)
	src := "oci:" + dir + ":latest"
	out := "oci:" + filepath.Join(t.TempDir(), "o") + ":t"
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no source", []string{}, "SOURCE"},
		{"three args", []string{src, out, "extra"}, "SOURCE"},
		{"layer compression", []string{"--layer-compression", "gzip", src, out}, "--layer-compression"},
		{"media type", []string{"--media-type", "nydus", src, out}, "--media-type"},
		{"platform", []string{"--platform", "linux/amd64/v8/x/y", src, out}, "--platform"},
		{"output", []string{"-o", "yaml", src, out}, "--output"},
		{"unknown tag", []string{"oci:" + dir + ":nope", out}, "nope"},
		{"archive without target", []string{"docker-archive:" + filepath.Join(dir, "missing.tar")}, "docker-archive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runConvertCLI(t, append([]string{"-q"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestConvertCLIRegistry converts through a registry (go-containerregistry's
// in-memory one) with several jobs, so that layers are uploaded from
// several goroutines at once; run it with -race too.
func TestConvertCLIRegistry(t *testing.T) {
	host, src := pushBusybox(t)
	out, err := runConvertCLI(t, "-q", "-o", "json", "--jobs", "3", "--plain-http", src.String())
	if err != nil {
		t.Fatalf("convert %s: %v", src, err)
	}
	var rep convertReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("-o json printed %q: %v", out, err)
	}
	if want := host + "/e2e/bb:1.0-erofs"; rep.Target != want {
		t.Errorf("target %s, want %s", rep.Target, want)
	}
	dst, err := name.ParseReference(rep.Target)
	if err != nil {
		t.Fatal(err)
	}
	d, err := remote.Head(dst)
	if err != nil {
		t.Fatalf("HEAD %s: %v", rep.Target, err)
	}
	if d.Digest.String() != rep.Digest {
		t.Errorf("%s is %s, the report says %s", rep.Target, d.Digest, rep.Digest)
	}
	for i, l := range rep.Images[0].Layers {
		if l.UploadSeconds == 0 {
			t.Errorf("layer %d: no upload time in the report: %+v", i, l)
		}
	}
	if _, err := runConvertCLI(t, "-q", "--plain-http", rep.Target); !errors.Is(err, oci.ErrLoop) {
		t.Errorf("converting %s: err = %v, want oci.ErrLoop", rep.Target, err)
	}
	// By digest, or under a tag without the suffix, the converted image is
	// refused all the same: its manifest names its source.
	byDigest := dst.Context().Digest(rep.Digest).String()
	if _, err := runConvertCLI(t, "-q", "--plain-http", byDigest); err == nil || !strings.Contains(err.Error(), "refusing to convert it again") {
		t.Errorf("converting %s: err = %v, want a refusal", byDigest, err)
	}
	// A single image of another platform than --platform asks for, as
	// docker pull --platform refuses it.
	if _, err := runConvertCLI(t, "-q", "--plain-http", "--platform", "linux/arm64", src.String(), host+"/e2e/bb:arm"); err == nil ||
		!strings.Contains(err.Error(), "no manifest matches the selected platforms (linux/arm64): it has linux/amd64") {
		t.Errorf("--platform linux/arm64 of a linux/amd64 image: err = %v", err)
	}
	if _, err := runConvertCLI(t, "-q", "--plain-http", "--platform", "linux/x86_64", src.String(), host+"/e2e/bb:amd"); err != nil {
		t.Errorf("--platform linux/x86_64 of a linux/amd64 image: %v", err)
	}
	// Text: the result, TARGET@DIGEST, alone on stdout (as crane push).
	text, err := runConvertCLI(t, "--plain-http", src.String(), host+"/e2e/bb:text")
	if err != nil {
		t.Fatal(err)
	}
	if want := host + "/e2e/bb:text@" + rep.Digest + "\n"; text != want {
		t.Errorf("stdout %q, want %q", text, want)
	}
}

// TestConvertCLILayoutTag: the default target of a layout's only image,
// given without a tag, is its tag plus the suffix.
func TestConvertCLILayoutTag(t *testing.T) {
	p, err := layout.FromPath(copyBusyboxLayout(t))
	if err != nil {
		t.Fatal(err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	img, err := ii.Image(mustManifests(t, ii)[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "l")
	r, err := oci.ParseRef("oci:"+dir+":v1", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := oci.Write(context.Background(), r, img, nil, oci.Remote{}); err != nil {
		t.Fatal(err)
	}
	out, err := runConvertCLI(t, "-q", "-o", "json", "oci:"+dir)
	if err != nil {
		t.Fatal(err)
	}
	var rep convertReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if want := "oci:" + dir + ":v1-erofs"; rep.Target != want {
		t.Errorf("target %s, want %s", rep.Target, want)
	}
	// The layout holds two images now: a source without a tag names them.
	out, err = runConvertCLI(t, "-q", "oci:"+dir)
	if err == nil || !strings.Contains(out+err.Error(), "the layout holds 2 images (tagged v1, v1-erofs): name one with oci:DIR:TAG") {
		t.Errorf("second convert of oci:DIR: %v\n%s", err, out)
	}
}

// pushBusybox starts a registry (go-containerregistry's, in memory) and
// pushes testdata/busybox's first image to it as e2e/bb:1.0.
func pushBusybox(t *testing.T) (host string, src name.Reference) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host = srv.Listener.Addr().String()
	src, err := name.ParseReference(host + "/e2e/bb:1.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(src, busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	return host, src
}

// busyboxImage is testdata/busybox's first image.
func busyboxImage(t *testing.T) v1.Image {
	t.Helper()
	p, err := layout.FromPath("../../testdata/busybox")
	if err != nil {
		t.Fatal(err)
	}
	ii, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	img, err := ii.Image(mustManifests(t, ii)[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func mustManifests(t *testing.T, ii v1.ImageIndex) []v1.Descriptor {
	t.Helper()
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	return im.Manifests
}

// TestCacheCLIPlatform: cache takes this node's platform of an index by
// default, as containerd pulls it; --platform all takes every one.
func TestCacheCLIPlatform(t *testing.T) {
	host, src := pushBusybox(t)
	img, err := remote.Image(src)
	if err != nil {
		t.Fatal(err)
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	extra, err := random.Layer(4096, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	oimg, err := mutate.AppendLayers(img, extra)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := oimg.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = other
	if oimg, err = mutate.ConfigFile(oimg, cf); err != nil {
		t.Fatal(err)
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: runtime.GOARCH}}},
		mutate.IndexAddendum{Add: oimg, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: other}}})
	ref, err := name.ParseReference(host + "/e2e/multi:1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
	app := &cli.App{Name: "ocierofs", Commands: []*cli.Command{cacheCommand}, Writer: io.Discard, ErrWriter: io.Discard, ExitErrHandler: func(*cli.Context, error) {}}
	entries := func(args ...string) int {
		t.Helper()
		dir := t.TempDir()
		if err := app.RunContext(context.Background(), append(append([]string{"ocierofs", "cache", "-q", "--plain-http"}, args...), ref.String(), dir)); err != nil {
			t.Fatalf("cache %q: %v", args, err)
		}
		m, _ := filepath.Glob(filepath.Join(dir, "sha256", "*", "*.erofs"))
		return len(m)
	}
	if n := entries(); n != 3 {
		t.Errorf("by default: %d entries, want this platform's 3", n)
	}
	if n := entries("--platform", "all"); n != 4 {
		t.Errorf("--platform all: %d entries, want 4", n)
	}

	// Converted, the index says how containerd takes its entries.
	if _, stderr, code := run(t, bin(t), "convert", "--plain-http", ref.String(), "oci:"+filepath.Join(t.TempDir(), "idx")+":t"); code != 0 ||
		!strings.Contains(stderr, "--platform 'linux(+erofs)/"+runtime.GOARCH+"'") {
		t.Errorf("convert of an index: exit %d, no pull hint:\n%s", code, stderr)
	}
	// An EROFS image (the -erofs twin) is not what containerd looks up:
	// refused, and the new DIR made for it goes again (review 20-b L6).
	if _, err := runConvertCLI(t, "-q", "--plain-http", src.String(), host+"/e2e/bb:twin"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ source, want string }{
		{host + "/e2e/bb:twin", "cache wants the tar image it was converted from"},
		{host + "/e2e/nothere:x", `not found: repository e2e/nothere on ` + host + ` has no tag "x"`},
	} {
		dir := filepath.Join(t.TempDir(), "new")
		err := app.RunContext(context.Background(), []string{"ocierofs", "cache", "-q", "--plain-http", tc.source, dir})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("cache %s: %v, want %q", tc.source, err, tc.want)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("cache %s: the DIR it made is left: %v", tc.source, err)
		}
	}
}

// loginRegistry is go-containerregistry's in-memory registry behind HTTP
// Basic authentication, as a registry with htpasswd has it; it records the
// user of every Authorization header it is sent, right or wrong.
type loginRegistry struct {
	host, user, password string

	mu        sync.Mutex
	sent      map[string]int // user → requests that carried it
	blobReads int            // GETs of blobs
}

func newLoginRegistry(t *testing.T, user, password string) *loginRegistry {
	t.Helper()
	r := &loginRegistry{user: user, password: password, sent: map[string]int{}}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, rq *http.Request) {
		u, p, ok := rq.BasicAuth()
		r.mu.Lock()
		if ok {
			r.sent[u]++
		}
		if rq.Method == http.MethodGet && strings.Contains(rq.URL.Path, "/blobs/sha256:") {
			r.blobReads++
		}
		r.mu.Unlock()
		if !ok || u != r.user || p != r.password {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
			return
		}
		reg.ServeHTTP(w, rq)
	}))
	t.Cleanup(srv.Close)
	r.host = srv.Listener.Addr().String()
	return r
}

// users are the users this registry was sent, sorted.
func (r *loginRegistry) users() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.sent))
}

func (r *loginRegistry) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	clear(r.sent)
	r.blobReads = 0
}

// TestConvertCLICredentials: each registry is sent its own credentials
// and never another's (skopeo's --src-creds and --dest-creds), and
// --username, which names no registry, is refused for two.
func TestConvertCLICredentials(t *testing.T) {
	// Nothing from this machine's docker or podman logins.
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	t.Setenv("REGISTRY_AUTH_FILE", "")
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	a := newLoginRegistry(t, "alice", "pa:ss") // a colon in a password is allowed
	b := newLoginRegistry(t, "bob", "pb")
	src, err := name.ParseReference(a.host + "/e2e/bb:1.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(src, busyboxImage(t), remote.WithAuth(&authn.Basic{Username: "alice", Password: "pa:ss"})); err != nil {
		t.Fatal(err)
	}
	layoutOut := "oci:" + filepath.Join(t.TempDir(), "o") + ":t"
	for _, tc := range []struct {
		name   string
		args   []string
		target string
		want   string   // in the error; "" for success
		aSent  []string // users registry a was sent
		bSent  []string
	}{
		{name: "each its own", args: []string{"--src-creds", "alice:pa:ss", "--dest-creds", "bob:pb"}, target: b.host + "/e2e/bb:1",
			aSent: []string{"alice"}, bSent: []string{"bob"}},
		{name: "username for one registry", args: []string{"--username", "alice", "--password", "pa:ss"}, target: a.host + "/e2e/bb:1-erofs",
			aSent: []string{"alice"}},
		{name: "username for the source of a layout", args: []string{"--username", "alice", "--password", "pa:ss"}, target: layoutOut,
			aSent: []string{"alice"}},
		{name: "username for two registries", args: []string{"--username", "alice", "--password", "pa:ss"}, target: b.host + "/e2e/bb:3",
			want: "--username: the source is on " + a.host + " and the target on " + b.host + ": give each its own with --src-creds and --dest-creds"},
		{name: "username and src-creds", args: []string{"--username", "alice", "--password", "pa:ss", "--src-creds", "alice:pa:ss"}, target: a.host + "/e2e/bb:4",
			want: "either --username and --password, or --src-creds and --dest-creds"},
		{name: "password without username", args: []string{"--password", "pa:ss"}, target: a.host + "/e2e/bb:8", want: "--password without --username"},
		{name: "dest-creds for a layout", args: []string{"--src-creds", "alice:pa:ss", "--dest-creds", "bob:pb"}, target: layoutOut,
			want: "--dest-creds: the target is not in a registry"},
		// Registry b is sent no credentials, and refuses the upload:
		// before any layer is converted.
		{name: "no dest-creds", args: []string{"--src-creds", "alice:pa:ss"}, target: b.host + "/e2e/bb:6",
			want: "cannot push to " + b.host + "/e2e/bb: ", aSent: []string{"alice"}},
		{name: "wrong dest-creds", args: []string{"--src-creds", "alice:pa:ss", "--dest-creds", "bob:nope"}, target: b.host + "/e2e/bb:7",
			want: "(log in with docker login " + b.host + ", or give --dest-creds USER:PASSWORD)", aSent: []string{"alice"}, bSent: []string{"bob"}},
		// Targets refused before any layer is read: the source itself
		// (once its manifest is), a digest (before anything).
		{name: "the source as target", args: []string{"--username", "alice", "--password", "pa:ss"}, target: src.String(),
			want: "target " + src.String() + " holds the source image sha256:", aSent: []string{"alice"}},
		{name: "a digest target", args: []string{"--src-creds", "alice:pa:ss", "--dest-creds", "bob:pb"}, target: b.host + "/e2e/bb@sha256:" + strings.Repeat("0", 64),
			want: "give a tag, not a digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.reset()
			b.reset()
			args := append([]string{"-q", "--plain-http"}, tc.args...)
			_, err := runConvertCLI(t, append(args, src.String(), tc.target)...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("convert: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(tc.want))):
				t.Fatalf("err = %v, want one with %q", err, tc.want)
			}
			checkSent(t, a, b, tc.aSent, tc.bSent)
			if a.blobReads > 0 && tc.want != "" {
				t.Errorf("%d layer or config reads before failing", a.blobReads)
			}
			if tc.want == "" && strings.HasPrefix(tc.target, b.host) {
				checkPushed(t, tc.target)
			}
		})
	}

	// From the environment, as the binary reads it (urfave/cli keeps a
	// flag's value from the environment in the flag: in-process, it would
	// stay for the cases after).
	t.Run("from the environment", func(t *testing.T) {
		a.reset()
		b.reset()
		t.Setenv("OCIEROFS_SRC_CREDS", "alice:pa:ss")
		t.Setenv("OCIEROFS_DEST_CREDS", "bob:pb")
		// A user and password in the environment (a mirror's) give way
		// to the credentials given for each side.
		t.Setenv("OCIEROFS_USERNAME", "mallory")
		t.Setenv("OCIEROFS_PASSWORD", "x")
		target := b.host + "/e2e/bb:env"
		_, stderr, code := run(t, bin(t), "--verbose", "convert", "-q", "--plain-http", src.String(), target)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		// --verbose logs the requests, never a password.
		basic := base64.StdEncoding.EncodeToString([]byte("alice:pa:ss"))
		if !strings.Contains(stderr, "--> GET http://"+a.host+"/v2/") || strings.Contains(stderr, "pa:ss") || strings.Contains(stderr, basic) {
			t.Errorf("--verbose logged:\n%s", stderr)
		}
		checkSent(t, a, b, []string{"alice"}, []string{"bob"})
		checkPushed(t, target)
	})
	// An auth file (skopeo's --authfile; docker's config.json format):
	// only its logins count, not docker's own.
	t.Run("auth file", func(t *testing.T) {
		a.reset()
		b.reset()
		auth := filepath.Join(t.TempDir(), "auth.json")
		basic := func(u, p string) string { return base64.StdEncoding.EncodeToString([]byte(u + ":" + p)) }
		if err := os.WriteFile(auth, []byte(fmt.Sprintf(`{"auths":{%q:{"auth":%q},%q:{"auth":%q}}}`,
			a.host, basic("alice", "pa:ss"), b.host, basic("bob", "pb"))), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := runConvertCLI(t, "-q", "--plain-http", "--authfile", auth, src.String(), b.host+"/e2e/bb:authfile"); err != nil {
			t.Fatalf("--authfile: %v", err)
		}
		checkSent(t, a, b, []string{"alice"}, []string{"bob"})
		checkPushed(t, b.host+"/e2e/bb:authfile")
		if _, err := runConvertCLI(t, "-q", "--plain-http", "--authfile", filepath.Join(t.TempDir(), "none.json"), src.String(), b.host+"/e2e/bb:x"); err == nil || !strings.Contains(err.Error(), "--authfile") {
			t.Errorf("a missing auth file: %v", err)
		}
	})
	// The password from stdin, as docker login --password-stdin takes it.
	t.Run("password from stdin", func(t *testing.T) {
		a.reset()
		b.reset()
		bin := bin(t)
		if _, stderr, code := runStdin(t, strings.NewReader("pa:ss\n"), bin, "convert", "-q", "--plain-http", "--username", "alice", "--password-stdin", src.String(), a.host+"/e2e/bb:stdin"); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		checkSent(t, a, b, []string{"alice"}, nil)
		if _, stderr, code := runStdin(t, strings.NewReader(""), bin, "convert", "-q", "--plain-http", "--username", "alice", "--password-stdin", src.String(), a.host+"/e2e/bb:stdin2"); code != 1 || !strings.Contains(stderr, "--password-stdin: stdin is empty") {
			t.Errorf("empty stdin: exit %d: %s", code, stderr)
		}
		if _, stderr, code := runStdin(t, strings.NewReader("pa:ss\n"), bin, "convert", "-q", "--plain-http", "--username", "alice", "--password-stdin", "docker-archive:/dev/stdin", a.host+"/e2e/bb:stdin3"); code != 1 || !strings.Contains(stderr, "--password-stdin: stdin is the docker archive") {
			t.Errorf("stdin for the password and the archive: exit %d: %s", code, stderr)
		}
	})
	// A user without a password: asked for it on a terminal, as docker
	// login and skopeo ask; elsewhere an error at once, never a prompt
	// that a script waits on.
	t.Run("password asked", func(t *testing.T) {
		bin := bin(t)
		for _, tc := range []struct {
			args         []string
			target       string
			aSent, bSent []string
		}{
			{[]string{"--username", "alice"}, a.host + "/e2e/bb:tty", []string{"alice"}, nil},
			{[]string{"--src-creds", "alice", "--dest-creds", "bob:pb"}, b.host + "/e2e/bb:tty", []string{"alice"}, []string{"bob"}},
		} {
			a.reset()
			b.reset()
			args := append(append([]string{"convert", "-q", "--plain-http"}, tc.args...), src.String(), tc.target)
			ptmx, tty := openPty(t)
			cmd := exec.Command(bin, args...)
			var stderr bytes.Buffer
			cmd.Stdin, cmd.Stderr = tty, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			echoed := readPty(ptmx)
			waitEcho(t, tty, false)
			io.WriteString(ptmx, "pa:ss\n")
			err := cmd.Wait()
			tty.Close()
			if err != nil {
				t.Fatalf("%q: %v: %s", tc.args, err, stderr.String())
			}
			if want := "Password for alice at " + a.host + ": "; !strings.HasPrefix(stderr.String(), want) {
				t.Errorf("%q: stderr %q, want the prompt %q", tc.args, stderr.String(), want)
			}
			if e := <-echoed; strings.Contains(e, "pa") {
				t.Errorf("%q: the terminal echoed %q", tc.args, e)
			}
			checkSent(t, a, b, tc.aSent, tc.bSent)
			if strings.HasPrefix(tc.target, b.host) {
				checkPushed(t, tc.target)
			}
		}

		// Interrupted at the prompt: the terminal echoes again.
		ptmx, tty := openPty(t)
		cmd := exec.Command(bin, "convert", "-q", "--plain-http", "--username", "alice", src.String(), a.host+"/e2e/bb:int")
		cmd.Stdin = tty
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		readPty(ptmx)
		waitEcho(t, tty, false)
		cmd.Process.Signal(os.Interrupt)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			if err == nil {
				t.Error("interrupted at the prompt: exit 0")
			}
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			t.Fatal("interrupted at the prompt: still waiting for the password after 20 s")
		}
		waitEcho(t, tty, true)
		tty.Close()

		// No terminal.
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--username", "alice"}, "--username alice: no password: give --password, --password-stdin or $OCIEROFS_PASSWORD, or run on a terminal to be asked for it"},
			{[]string{"--src-creds", "alice"}, "--src-creds: want USER:PASSWORD, or run on a terminal to be asked for the password"},
		} {
			a.reset()
			b.reset()
			args := append(append([]string{"convert", "-q", "--plain-http"}, tc.args...), src.String(), a.host+"/e2e/bb:notty")
			if _, stderr, code := run(t, bin, args...); code != 1 || !strings.Contains(stderr, tc.want) {
				t.Errorf("%q without a terminal: exit %d: %s", tc.args, code, stderr)
			}
			checkSent(t, a, b, nil, nil)
		}
	})
}

// openPty returns a new pseudo-terminal: the side that types (ptmx) and the
// terminal a program reads (tty).
func openPty(t *testing.T) (ptmx, tty *os.File) {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	fd := int(ptmx.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	if tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tty.Close() })
	return ptmx, tty
}

// readPty collects what the terminal shows until its last reader closes it.
func readPty(ptmx *os.File) <-chan string {
	c := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(ptmx) // EIO once no one has the terminal open
		c <- string(b)
	}()
	return c
}

// waitEcho waits until the terminal's echo is on or off: typed before the
// program turned it off, a password would be echoed.
func waitEcho(t *testing.T, tty *os.File, on bool) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 20*time.Second; time.Sleep(5 * time.Millisecond) {
		tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if tio.Lflag&unix.ECHO != 0 == on {
			return
		}
	}
	t.Fatalf("the terminal's echo is not %v after 20 s", map[bool]string{true: "on", false: "off"}[on])
}

// checkSent checks the users registries a and b were sent.
func checkSent(t *testing.T, a, b *loginRegistry, aSent, bSent []string) {
	t.Helper()
	if got := a.users(); !slices.Equal(got, aSent) {
		t.Errorf("registry a (the source's) was sent users %q, want %q", got, aSent)
	}
	if got := b.users(); !slices.Equal(got, bSent) {
		t.Errorf("registry b was sent users %q, want %q", got, bSent)
	}
}

// checkPushed checks that target, on registry b, is there.
func checkPushed(t *testing.T, target string) {
	t.Helper()
	dst, err := name.ParseReference(target)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Head(dst, remote.WithAuth(&authn.Basic{Username: "bob", Password: "pb"})); err != nil {
		t.Errorf("HEAD %s: %v", dst, err)
	}
}

// TestConvertCLIPlainHTTP: a plain-HTTP registry on an address that is not
// loopback's 127.0.0.1 or a private network's (which go-containerregistry
// reaches over HTTP by itself): --insecure reaches it, as crane's does, and
// without either flag the error says which flag it takes.
func TestConvertCLIPlainHTTP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	srv := httptest.NewUnstartedServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	src, err := name.ParseReference(l.Addr().String()+"/e2e/bb:1.0", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(src, busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	b := bin(t)
	out := "oci:" + filepath.Join(t.TempDir(), "o") + ":t"
	if _, e, code := run(t, b, "convert", "-q", src.String(), out); code != 1 || !strings.Contains(e, "server gave HTTP response to HTTPS client (a plain-HTTP registry: add --plain-http)") {
		t.Errorf("without a flag: exit %d: %s", code, e)
	}
	for _, flag := range []string{"--plain-http", "--insecure"} {
		if _, e, code := run(t, b, "convert", "-q", flag, src.String(), out+strings.TrimLeft(flag, "-")); code != 0 {
			t.Errorf("%s: exit %d: %s", flag, code, e)
		}
	}
}

// rawManifest is a manifest to push as it is.
type rawManifest struct {
	raw []byte
	mt  types.MediaType
}

func (r rawManifest) RawManifest() ([]byte, error)        { return r.raw, nil }
func (r rawManifest) MediaType() (types.MediaType, error) { return r.mt, nil }

// TestConvertCLIConfigSize: a config is read into memory, so one a registry
// declares of gigabytes or of no size (-1) is refused before it is read
// (review 20-a: 2 GiB took 6.7 GB, -1 grew without end).
func TestConvertCLIConfigSize(t *testing.T) {
	host, _ := pushBusybox(t)
	for _, size := range []int64{2 << 30, -1, convert.MaxConfigSize + 1} {
		m := fmt.Sprintf(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",`+
			`"config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%d},"layers":[]}`, strings.Repeat("ab", 32), size)
		ref, err := name.ParseReference(fmt.Sprintf("%s/e2e/big:%d", host, max(size, 0)))
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Put(ref, rawManifest{[]byte(m), types.OCIManifestSchema1}); err != nil {
			t.Fatal(err)
		}
		_, err = runConvertCLI(t, "-q", "--plain-http", ref.String(), "oci:"+filepath.Join(t.TempDir(), "o")+":t")
		if want := fmt.Sprintf("the manifest gives it %d bytes: a config has 0 to %d", size, convert.MaxConfigSize); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config of %d bytes: err = %v, want %q", size, err, want)
		}
	}
}

// TestConvertCLIManyEntries: an index of thousands of manifests or an image
// of thousands of layers cost a converter minutes and gigabytes (review
// 20-a); they are refused before anything they name is read.
func TestConvertCLIManyEntries(t *testing.T) {
	host, src := pushBusybox(t)
	bb, err := remote.Head(src)
	if err != nil {
		t.Fatal(err)
	}
	fake := func(i int) string { return fmt.Sprintf("sha256:%064x", i) }
	var layers, manifests []string
	for i := range convert.MaxLayers + 1 {
		layers = append(layers, fmt.Sprintf(`{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":%q,"size":10}`, fake(i)))
	}
	for i := range 257 {
		// The registry wants every manifest there: one, many times.
		manifests = append(manifests, fmt.Sprintf(`{"mediaType":%q,"digest":%q,"size":%d,"platform":{"os":"linux","architecture":"amd64","variant":"v%d"}}`, bb.MediaType, bb.Digest, bb.Size, i))
	}
	for _, tc := range []struct {
		tag, raw, want string
		mt             types.MediaType
	}{
		{"layers", `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"` + fake(0) + `","size":10},"layers":[` + strings.Join(layers, ",") + `]}`,
			"501 layers: overlayfs stacks at most 500", types.OCIManifestSchema1},
		{"index", `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[` + strings.Join(manifests, ",") + `]}`,
			"257 manifests: an index of up to 256 is converted", types.OCIImageIndex},
	} {
		ref, err := name.ParseReference(host + "/e2e/bb:many-" + tc.tag) // beside the image it lists
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Put(ref, rawManifest{[]byte(tc.raw), tc.mt}); err != nil {
			t.Fatal(err)
		}
		_, err = runConvertCLI(t, "-q", "--plain-http", ref.String(), "oci:"+filepath.Join(t.TempDir(), "o")+":t")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.tag, err, tc.want)
		}
	}
}

// TestConvertCLISourceAsTarget: a target that names the source image,
// however spelt, is refused before it could be replaced by its twin
// (review 20-c: oci:./bb and oci:$PWD/bb:latest went through).
func TestConvertCLISourceAsTarget(t *testing.T) {
	dir := copyBusyboxLayout(t)
	index := readFile(t, filepath.Join(dir, "index.json"))
	rel, err := filepath.Rel(mustGetwd(t), dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"oci:" + dir + ":latest", "oci:" + dir + ":latest"},
		{"oci:" + rel, "oci:" + dir + ":latest"},
		{"oci:" + dir + "/:latest", "oci:" + rel + ":latest"},
	} {
		_, err := runConvertCLI(t, append([]string{"-q"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "holds the source image") {
			t.Errorf("convert %s %s: %v, want a refusal", args[0], args[1], err)
		}
	}
	if !bytes.Equal(readFile(t, filepath.Join(dir, "index.json")), index) {
		t.Error("the layout changed")
	}
	// By tag and digest against the tag, in a registry.
	host, src := pushBusybox(t)
	d, err := remote.Head(src)
	if err != nil {
		t.Fatal(err)
	}
	byBoth := src.String() + "@" + d.Digest.String()
	if _, err := runConvertCLI(t, "-q", "--plain-http", byBoth, host+"/e2e/bb:1.0"); err == nil || !strings.Contains(err.Error(), "holds the source image "+d.Digest.String()) {
		t.Errorf("convert %s %s: %v, want a refusal", byBoth, src, err)
	}
}

func mustGetwd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// TestConvertCLIMaxLayerSize: --max-layer-size fails a layer whose
// uncompressed tar is larger, naming it (review 20-a: a 2 MB gzip of zeros
// expanded to 2 GiB, bounded by free disk only); the others convert.
func TestConvertCLIMaxLayerSize(t *testing.T) {
	src := "oci:" + copyBusyboxLayout(t) + ":latest"
	out := "oci:" + filepath.Join(t.TempDir(), "o") + ":t"
	_, err := runConvertCLI(t, "-q", "--max-layer-size", "1M", src, out)
	if err == nil || !strings.Contains(err.Error(), "the uncompressed tar is larger than the 1048576 bytes a layer may have") ||
		!strings.Contains(err.Error(), "sha256:74cdd89a491a") {
		t.Errorf("--max-layer-size 1M: %v, want the busybox layer (2 MB) refused by name", err)
	}
	if _, err := runConvertCLI(t, "-q", "--max-layer-size", "3M", src, out); err != nil {
		t.Errorf("--max-layer-size 3M: %v", err)
	}
	// Flattened too (review 20-d: the bound was not applied there).
	if _, err := runConvertCLI(t, "-q", "--flatten", "--max-layer-size", "1M", src, out+"f"); err == nil || !strings.Contains(err.Error(), "larger than the 1048576 bytes a layer may have") {
		t.Errorf("--flatten --max-layer-size 1M: %v, want the busybox layer refused", err)
	}
}

// TestConvertCLIArchiveStream: docker save's archive read as docker save
// writes it into a pipe (docker save IMAGE | ocierofs convert
// docker-archive:/dev/stdin …) and gzipped, to the same image as from the
// file.
func TestConvertCLIArchiveStream(t *testing.T) {
	dir := t.TempDir()
	archive := filepath.Join(dir, "bb.tar")
	tag := name.MustParseReference("example.com/e2e/bb:1.0").(name.Tag)
	if err := tarball.WriteToFile(archive, tag, busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw)
	zw.Close()
	gzPath := filepath.Join(dir, "bb.tar.gz")
	if err := os.WriteFile(gzPath, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	b := bin(t)
	convertTo := func(stdin io.Reader, source string) string {
		t.Helper()
		target := "oci:" + filepath.Join(dir, "out") + ":" + filepath.Base(source)
		out, stderr, code := runStdin(t, stdin, b, "convert", source, target)
		if code != 0 {
			t.Fatalf("convert %s: exit %d: %s", source, code, stderr)
		}
		_, digest, _ := strings.Cut(strings.TrimSpace(out), "@")
		return digest
	}
	want := convertTo(nil, "docker-archive:"+archive)
	if !strings.HasPrefix(want, "sha256:") {
		t.Fatalf("convert printed no digest: %q", want)
	}
	if got := convertTo(bytes.NewReader(raw), "docker-archive:/dev/stdin"); got != want {
		t.Errorf("from a pipe: %s, want %s", got, want)
	}
	if got := convertTo(nil, "docker-archive:"+gzPath+":"+tag.String()); got != want {
		t.Errorf("gzipped: %s, want %s", got, want)
	}
	// The copy goes to --tmpdir, bounded by --max-layer-size.
	t.Setenv("TMPDIR", filepath.Join(dir, "missing"))
	_, stderr, code := runStdin(t, bytes.NewReader(raw), b, "convert", "--tmpdir", t.TempDir(), "--max-layer-size", "1K",
		"docker-archive:/dev/stdin", "oci:"+filepath.Join(dir, "small"))
	if code != 1 || !strings.Contains(stderr, "over the bound of 1024 a file") || !strings.Contains(stderr, "raise --max-layer-size") {
		t.Errorf("a pipe of files over --max-layer-size: exit %d: %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "small")); err == nil {
		t.Error("a refused archive left its target layout")
	}
}
