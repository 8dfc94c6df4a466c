package imagebuild

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

const testCerts = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"

// testOptions writes stand-in programs and a CA bundle into dir: the
// image does not look inside them.
func testOptions(t *testing.T, dir string) Options {
	t.Helper()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certs := write("ca.crt", testCerts)
	var platforms []Platform
	for _, arch := range []string{"amd64", "arm64"} {
		platforms = append(platforms, Platform{OS: "linux", Architecture: arch, Programs: []Program{
			{Name: "ocierofs", Path: write("ocierofs-"+arch, "ocierofs for "+arch)},
			{Name: "ocierofs-mirror", Path: write("mirror-"+arch, "mirror for "+arch)},
		}})
	}
	return Options{Version: "v1.2.3", Revision: "0123abc", Source: "https://github.com/ocierofs/ocierofs",
		Created: time.Unix(1700000000, 0), CACerts: certs, Platforms: platforms}
}

func digest(t *testing.T, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestIndexReproducible builds the index twice from the same inputs, in
// directories of different names: same digest. A change of any input
// (build time, a program's bytes, the CA bundle) changes it.
func TestIndexReproducible(t *testing.T) {
	a, b := t.TempDir(), filepath.Join(t.TempDir(), "elsewhere")
	if err := os.MkdirAll(b, 0o755); err != nil {
		t.Fatal(err)
	}
	optA, optB := testOptions(t, a), testOptions(t, b)
	idxA, err := Index(optA)
	if err != nil {
		t.Fatal(err)
	}
	idxB, err := Index(optB)
	if err != nil {
		t.Fatal(err)
	}
	da, db := digest(t, idxA), digest(t, idxB)
	if da != db {
		t.Fatalf("same inputs, different digests: %s and %s", da, db)
	}
	// The layers too, not only what names them.
	for _, idx := range []v1.ImageIndex{idxA, idxB} {
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range im.Manifests {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			layers, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := layers[0].Digest(); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("index %s", da)

	later := optA
	later.Created = optA.Created.Add(time.Second)
	changedBin := testOptions(t, t.TempDir())
	if err := os.WriteFile(changedBin.Platforms[1].Programs[0].Path, []byte("another build"), 0o644); err != nil {
		t.Fatal(err)
	}
	changedCerts := testOptions(t, t.TempDir())
	if err := os.WriteFile(changedCerts.CACerts, []byte(testCerts+testCerts), 0o644); err != nil {
		t.Fatal(err)
	}
	for what, opt := range map[string]Options{"build time": later, "arm64 ocierofs": changedBin, "CA bundle": changedCerts} {
		idx, err := Index(opt)
		if err != nil {
			t.Fatal(err)
		}
		if d := digest(t, idx); d == da {
			t.Errorf("another %s, same digest %s", what, d)
		}
	}
}

// layerFiles reads the one layer of img: its headers by name, and the
// contents of its regular files.
func layerFiles(t *testing.T, img v1.Image) (map[string]*tar.Header, map[string][]byte, []string) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	if mt, _ := layers[0].MediaType(); mt != types.OCILayer {
		t.Errorf("layer media type %s, want %s", mt, types.OCILayer)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	hdrs, data := map[string]*tar.Header{}, map[string][]byte{}
	var order []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if hdrs[name] != nil {
			t.Errorf("%s twice in the layer", name)
		}
		hdrs[name] = h
		order = append(order, name)
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			data[name] = b
		}
	}
	return hdrs, data, order
}

// TestImageContents checks each platform's config (entrypoint, a non-root
// user, os/arch, labels) and layer (the programs, the CA bundle, the user
// in /etc/passwd, writable /tmp and home, fixed times and owners).
func TestImageContents(t *testing.T) {
	opt := testOptions(t, t.TempDir())
	idx, err := Index(opt)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s", im.MediaType)
	}
	if got := im.Annotations["org.opencontainers.image.version"]; got != "v1.2.3" {
		t.Errorf("index annotation version = %q", got)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("%d manifests, want 2", len(im.Manifests))
	}
	for i, d := range im.Manifests {
		arch := opt.Platforms[i].Architecture
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != arch {
			t.Errorf("manifest %d: platform %+v, want linux/%s", i, d.Platform, arch)
		}
		if d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("manifest %d: media type %s", i, d.MediaType)
		}
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != arch {
			t.Errorf("%s: config os/arch %s/%s", arch, cf.OS, cf.Architecture)
		}
		if !slices.Equal(cf.Config.Entrypoint, []string{"/usr/local/bin/ocierofs"}) {
			t.Errorf("%s: entrypoint %q", arch, cf.Config.Entrypoint)
		}
		if cf.Config.User != "65532:65532" {
			t.Errorf("%s: user %q, want 65532:65532", arch, cf.Config.User)
		}
		if !cf.Created.Equal(opt.Created) || len(cf.History) != 1 || !cf.History[0].Created.Equal(opt.Created) {
			t.Errorf("%s: created %v, history %+v, want every time %v", arch, cf.Created, cf.History, opt.Created)
		}
		if cf.Config.Labels["org.opencontainers.image.revision"] != "0123abc" {
			t.Errorf("%s: labels %v", arch, cf.Config.Labels)
		}
		if !slices.Contains(cf.Config.Env, "HOME=/home/ocierofs") {
			t.Errorf("%s: env %q", arch, cf.Config.Env)
		}

		hdrs, data, order := layerFiles(t, img)
		for _, want := range []struct {
			name string
			typ  byte
			mode int64
			uid  int
		}{
			{"usr/local/bin/ocierofs", tar.TypeReg, 0o755, 0},
			{"usr/local/bin/ocierofs-mirror", tar.TypeReg, 0o755, 0},
			{"etc/ssl/certs/ca-certificates.crt", tar.TypeReg, 0o644, 0},
			{"etc/passwd", tar.TypeReg, 0o644, 0},
			{"etc/group", tar.TypeReg, 0o644, 0},
			{"tmp", tar.TypeDir, 0o1777, 0},
			{"home/ocierofs", tar.TypeDir, 0o755, 65532},
			{"var/lib/ocierofs", tar.TypeDir, 0o750, 65532},
		} {
			h := hdrs[want.name]
			if h == nil {
				t.Errorf("%s: no %s in the layer", arch, want.name)
				continue
			}
			if h.Typeflag != want.typ || h.Mode != want.mode || h.Uid != want.uid || h.Gid != want.uid {
				t.Errorf("%s: %s: type %c mode %o owner %d:%d, want %c %o %d:%d", arch, want.name, h.Typeflag, h.Mode, h.Uid, h.Gid, want.typ, want.mode, want.uid, want.uid)
			}
		}
		for name, h := range hdrs {
			if !h.ModTime.Equal(opt.Created) || h.Uname != "" || h.Gname != "" {
				t.Errorf("%s: %s: mtime %v, owner names %q:%q; want %v and none", arch, name, h.ModTime, h.Uname, h.Gname, opt.Created)
			}
		}
		// Parents come before their children (some unpackers want it).
		seen := map[string]bool{}
		for _, n := range order {
			if p := filepath.Dir(n); p != "." && !seen[p] {
				t.Errorf("%s: %s comes before its directory", arch, n)
			}
			seen[n] = true
		}
		if got := string(data["usr/local/bin/ocierofs"]); got != "ocierofs for "+arch {
			t.Errorf("%s: /usr/local/bin/ocierofs holds %q, another platform's program?", arch, got)
		}
		if got := string(data["etc/ssl/certs/ca-certificates.crt"]); got != testCerts {
			t.Errorf("%s: CA bundle %q", arch, got)
		}
		if !bytes.Contains(data["etc/passwd"], []byte("\nocierofs:x:65532:65532:ocierofs:/home/ocierofs:")) {
			t.Errorf("%s: /etc/passwd lacks the user:\n%s", arch, data["etc/passwd"])
		}
	}
}

func TestIndexRefuses(t *testing.T) {
	opt := testOptions(t, t.TempDir())
	bad := map[string]func(o *Options){
		"no version":     func(o *Options) { o.Version = "" },
		"no platforms":   func(o *Options) { o.Platforms = nil },
		"no CA bundle":   func(o *Options) { o.CACerts = filepath.Join(t.TempDir(), "missing") },
		"platform twice": func(o *Options) { o.Platforms = append(o.Platforms, o.Platforms[0]) },
		"program path as name": func(o *Options) {
			o.Platforms = []Platform{{OS: "linux", Architecture: "amd64", Programs: []Program{{Name: "bin/x", Path: opt.CACerts}}}}
		},
		"CA bundle without a certificate": func(o *Options) {
			p := filepath.Join(t.TempDir(), "empty.crt")
			os.WriteFile(p, []byte("nothing\n"), 0o644)
			o.CACerts = p
		},
	}
	for what, change := range bad {
		o := opt
		o.Platforms = slices.Clone(opt.Platforms)
		change(&o)
		if _, err := Index(o); err == nil {
			t.Errorf("%s: no error", what)
		}
	}
}
