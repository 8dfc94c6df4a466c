package main

import (
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/internal/testregistry"
)

// TestCheckCLI: check of a conversion finds its source by itself in a
// registry, is given it for a layout, and exits 1 with the differences
// against another image.
func TestCheckCLI(t *testing.T) {
	host, src := pushBusybox(t)
	b := bin(t)
	target := host + "/e2e/bb:1.0-erofs"
	if _, e, code := run(t, b, "convert", "-q", src.String(), target); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, e)
	}
	if out, e, code := run(t, b, "check", target); code != 0 || !strings.Contains(out, target+" matches its source "+host+"/e2e/bb@sha256:") {
		t.Errorf("check %s: exit %d: %s%s", target, code, out, e)
	}
	layout := "oci:" + filepath.Join(t.TempDir(), "l") + ":bb"
	if _, e, code := run(t, b, "convert", "-q", src.String(), layout); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, e)
	}
	if _, e, code := run(t, b, "check", layout); code != 1 || !strings.Contains(e, "give SOURCE") {
		t.Errorf("check %s alone: exit %d: %s", layout, code, e)
	}
	if out, e, code := run(t, b, "check", "-q", layout, src.String()); code != 0 || out != "" {
		t.Errorf("check -q %s %s: exit %d: %q %s", layout, src, code, out, e)
	}
	// busybox's one layer is a 2 MB tar.
	if out, e, code := run(t, b, "check", "--max-layer-size", "1M", target); code != 1 || !strings.Contains(e, "layer 1: source layer sha256:") || !strings.Contains(e, "larger than the 1048576 bytes a layer may have") {
		t.Errorf("check --max-layer-size 1M: exit %d: %s%s", code, out, e)
	}
	if out, e, code := run(t, b, "check", "-q", "--max-layer-size", "4M", target); code != 0 {
		t.Errorf("check --max-layer-size 4M: exit %d: %s%s", code, out, e)
	}

	// Another source: one more layer, with a file.
	img, err := remote.Image(src)
	if err != nil {
		t.Fatal(err)
	}
	added, err := random.Layer(100, types.OCILayer)
	if err != nil {
		t.Fatal(err)
	}
	other, err := mutate.AppendLayers(img, added)
	if err != nil {
		t.Fatal(err)
	}
	otherRef, _ := name.ParseReference(host + "/e2e/bb:other")
	if err := remote.Write(otherRef, other); err != nil {
		t.Fatal(err)
	}
	out, e, code := run(t, b, "check", target, otherRef.String())
	if code != 1 || !strings.Contains(out, `names its source "sha256:`) || !strings.Contains(out, "config: history: source") || !strings.Contains(out, "3 layers, the source 4") ||
		!strings.Contains(e, "check: 3 differences between "+target+" and its source "+otherRef.String()) {
		t.Errorf("check against another image: exit %d: %s%s", code, out, e)
	}
}

// TestCheckSpecCLI: check --spec takes a conversion to the specification's
// media types as conformant and names, by section, what a conversion to
// containerd's media types breaks.
func TestCheckSpecCLI(t *testing.T) {
	b := bin(t)
	src := "oci:../../testdata/busybox"
	dir := t.TempDir()
	specOut := "oci:" + filepath.Join(dir, "spec") + ":bb"
	if _, e, code := run(t, b, "convert", "-q", "--media-type", "spec", "--layer-compression", "zstd", src, specOut); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, e)
	}
	if out, e, code := run(t, b, "check", "--spec", specOut); code != 0 || !strings.Contains(out, "conforms to the EROFS image layer specification (0 SHOULDs unmet)") {
		t.Errorf("check --spec %s: exit %d: %s%s", specOut, code, out, e)
	}
	ctrOut := "oci:" + filepath.Join(dir, "containerd") + ":bb"
	if _, e, code := run(t, b, "convert", "-q", src, ctrOut); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, e)
	}
	out, e, code := run(t, b, "check", "--spec", ctrOut)
	if code != 1 || !strings.Contains(out, "§4: layer 0: media type application/vnd.erofs.layer.v1 is none of §2.1, §2.2") ||
		!strings.Contains(e, "does not conform to the EROFS image layer specification") {
		t.Errorf("check --spec %s: exit %d: %s%s", ctrOut, code, out, e)
	}
	if _, e, code := run(t, b, "check", "--spec", specOut, ctrOut); code == 0 || !strings.Contains(e, "want IMAGE") {
		t.Errorf("check --spec with two images: exit %d: %s", code, e)
	}
}

// TestCheckReferrers: convert --referrer's conversions are found from the
// source alone, on a registry with the referrers API (go-containerregistry's,
// with it turned on) and on one without (Debian's docker-registry), where
// go-containerregistry keeps the OCI referrers tag schema's sha256-<hex> tag
// instead; a conversion without ocierofs' source annotation finds its
// source through its subject.
func TestCheckReferrers(t *testing.T) {
	b := bin(t)
	for _, tc := range []struct {
		name string
		api  bool
		host func(t *testing.T) string
	}{
		{"referrers API", true, func(t *testing.T) string {
			srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(true)))
			t.Cleanup(srv.Close)
			return srv.Listener.Addr().String()
		}},
		{"docker-registry", false, func(t *testing.T) string { return testregistry.New(t, testregistry.Config{}).Host }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := tc.host(t)
			src, err := name.ParseReference(host + "/e2e/bb:1.0")
			if err != nil {
				t.Fatal(err)
			}
			srcImg := busyboxImage(t)
			if err := remote.Write(src, srcImg); err != nil {
				t.Fatal(err)
			}
			srcDigest, err := srcImg.Digest()
			if err != nil {
				t.Fatal(err)
			}
			target := host + "/e2e/bb:1.0-erofs"
			if _, e, code := run(t, b, "convert", "-q", "--referrer", "--media-type", "spec", src.String(), target); code != 0 {
				t.Fatalf("convert: exit %d: %s", code, e)
			}
			// Where the fallback is and is not: the tag is there only
			// without the API.
			repo := src.Context()
			fallback := repo.Tag(strings.Replace(srcDigest.String(), ":", "-", 1))
			_, err = remote.Head(fallback)
			if tc.api && err == nil {
				t.Errorf("%s: a fallback tag, with the referrers API", fallback)
			}
			if !tc.api {
				if err != nil {
					t.Errorf("%s: %v: want the referrers tag schema's index", fallback, err)
				}
				resp, err := http.Get("http://" + host + "/v2/e2e/bb/referrers/" + srcDigest.String())
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("docker-registry answers the referrers API: %s", resp.Status)
				}
			}

			out, e, code := run(t, b, "check", src.String())
			if code != 0 || !strings.Contains(out, "which refers to "+repo.String()+"@"+srcDigest.String()+", matches it") ||
				!strings.Contains(out, "matches the EROFS images that refer to it: 1 image") {
				t.Errorf("check %s: exit %d: %s%s", src, code, out, e)
			}

			// Another tool's conversion: no ocierofs annotations, the
			// subject only.
			conv, err := remote.Image(mustRef(t, target))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := conv.RawManifest()
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(raw, &m); err != nil {
				t.Fatal(err)
			}
			delete(m, "annotations")
			for _, l := range m["layers"].([]any) {
				delete(l.(map[string]any), "annotations")
			}
			stripped, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			other := host + "/e2e/bb:other-tool"
			if err := remote.Put(mustRef(t, other), rawManifest{stripped, types.OCIManifestSchema1}); err != nil {
				t.Fatal(err)
			}
			if out, e, code := run(t, b, "check", other); code != 0 || !strings.Contains(out, other+" matches its source "+repo.String()+"@"+srcDigest.String()) {
				t.Errorf("check %s: exit %d: %s%s", other, code, out, e)
			}
			// Both refer to the source now.
			if out, e, code := run(t, b, "check", "-q", src.String()); code != 0 || out != "" {
				t.Errorf("check -q %s: exit %d: %s%s", src, code, out, e)
			}

			// An index: its images' referrers.
			idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
				mutate.IndexAddendum{Add: srcImg, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}})
			idxRef := mustRef(t, host+"/e2e/bbi:1.0")
			if err := remote.WriteIndex(idxRef, idx); err != nil {
				t.Fatal(err)
			}
			if _, e, code := run(t, b, "convert", "-q", "--referrer", idxRef.String()); code != 0 {
				t.Fatalf("convert %s: exit %d: %s", idxRef, code, e)
			}
			if out, e, code := run(t, b, "check", idxRef.String()); code != 0 || !strings.Contains(out, "matches the EROFS images that refer to it: 1 image") {
				t.Errorf("check %s: exit %d: %s%s", idxRef, code, out, e)
			}
		})
	}
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
