package mirror_test

// Helpers of the end-to-end tests: Debian's docker-registry with
// notifications pointed at serve, images made with archive/tar and gzip,
// a throttling proxy, and the mount + umoci comparison of a twin with its
// source (as convert's registry tests do).

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/internal/testregistry"
)

var must = roundtrip.Must

// ---------------------------------------------------------------------------
// The registry.

// registry is one docker-registry process (internal/testregistry); host
// is its 127.0.0.1:PORT.
type registry struct {
	*testregistry.Registry
	host string
}

func freePort(t testing.TB) int {
	port, err := testregistry.FreePort()
	must(t, err)
	return port
}

// notifyConfig points the registry's notifications at url with the header.
func notifyConfig(url, header string) string {
	return fmt.Sprintf(`notifications:
  endpoints:
    - name: ocierofs
      url: %s
      headers:
        Authorization: [%q]
      timeout: 3s
      threshold: 3
      backoff: 200ms
      ignoredmediatypes:
        - application/octet-stream
`, url, header)
}

// startRegistry runs docker-registry on 127.0.0.1 until the test ends;
// extra is appended to its configuration. Under -short it skips the test:
// the fast tier starts no registry.
func startRegistry(t testing.TB, extra string) *registry {
	t.Helper()
	r := testregistry.New(t, testregistry.Config{Extra: extra})
	return &registry{Registry: r, host: r.Host}
}

func (r *registry) ref(t testing.TB, s string) name.Reference {
	t.Helper()
	n, err := name.ParseReference(r.host+"/"+s, name.Insecure)
	must(t, err)
	return n
}

func (r *registry) push(t testing.TB, repoTag string, img v1.Image) v1.Hash {
	t.Helper()
	must(t, remote.Write(r.ref(t, repoTag), img))
	d, err := img.Digest()
	must(t, err)
	return d
}

// twin waits for repo:tag's twin made from digest src.
func (r *registry) waitTwin(t testing.TB, repoTag string, src v1.Hash, timeout time.Duration) (v1.Image, v1.Hash) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	ref := r.ref(t, repoTag+"-erofs")
	for time.Now().Before(deadline) {
		if d, err := remote.Get(ref); err == nil && strings.Contains(string(d.Manifest), src.String()) {
			img, err := d.Image()
			must(t, err)
			return img, d.Digest
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no twin %s of %s after %s", ref, src, timeout)
	return nil, v1.Hash{}
}

// throttle is a proxy in front of the registry that slows blob downloads
// to rate bytes a second, so a conversion lasts long enough to be killed.
type throttle struct {
	host string
	sent atomic.Int64
}

func newThrottle(t testing.TB, upstream string, rate int) *throttle {
	th := &throttle{}
	rp := testregistry.Proxy(t, upstream)
	rp.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method == http.MethodGet && strings.Contains(resp.Request.URL.Path, "/blobs/sha256:") {
			resp.Body = testregistry.Throttle(resp.Body, rate, &th.sent)
		}
		return nil
	}
	th.host = testregistry.Serve(t, rp)
	return th
}

func (th *throttle) bytes() int64 { return th.sent.Load() }

// ---------------------------------------------------------------------------
// Images.

var testTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type entry struct {
	hdr  tar.Header
	data []byte
}

func dir(name string, mode int64) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode}}
}

func file(name string, mode int64, data []byte) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data: data}
}

func symlink(name, target string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

func whiteout(name string) entry {
	i := strings.LastIndexByte(name, '/')
	return file(name[:i+1]+".wh."+name[i+1:], 0o644, nil)
}

// tarLayer is a tar+gzip layer of entries (diffID true unless lie).
type blobLayer struct {
	blob   []byte
	diffID v1.Hash
}

func (l *blobLayer) Digest() (v1.Hash, error)            { return sha256Of(l.blob), nil }
func (l *blobLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *blobLayer) Size() (int64, error)                { return int64(len(l.blob)), nil }
func (l *blobLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (l *blobLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.blob)), nil
}
func (l *blobLayer) Uncompressed() (io.ReadCloser, error) {
	zr, err := gzip.NewReader(bytes.NewReader(l.blob))
	if err != nil {
		return nil, err
	}
	return zr, nil
}

func sha256Of(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}
}

func tarLayer(t testing.TB, entries ...entry) *blobLayer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if h.ModTime.IsZero() {
			h.ModTime = testTime
		}
		h.Format = tar.FormatPAX
		must(t, tw.WriteHeader(&h))
		_, err := tw.Write(e.data)
		must(t, err)
	}
	must(t, tw.Close())
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	zw.Write(buf.Bytes())
	must(t, zw.Close())
	return &blobLayer{blob: gz.Bytes(), diffID: sha256Of(buf.Bytes())}
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// baseLayer is a small root filesystem; seed makes it unique, size is the
// bytes of random (incompressible) content in it.
func baseLayer(t testing.TB, seed uint64, size int) *blobLayer {
	return tarLayer(t,
		dir(".", 0o755), dir("bin", 0o755), dir("etc", 0o755), dir("usr", 0o755), dir("usr/lib", 0o755), dir("var", 0o755), dir("var/cache", 0o700),
		file("etc/os-release", 0o644, fmt.Appendf(nil, "ID=mirror-test\nSEED=%d\n", seed)),
		file("bin/tool", 0o755, randomBytes(seed, 9000)),
		symlink("bin/sh", "tool"),
		file("usr/lib/blob", 0o644, randomBytes(seed+1, size)),
		file("var/cache/old", 0o600, []byte("stale")),
	)
}

// appLayer is a top layer that adds, replaces and deletes.
func appLayer(t testing.TB, app string) *blobLayer {
	return tarLayer(t,
		dir("app", 0o755),
		file("app/"+app, 0o755, fmt.Appendf(nil, "#!/bin/sh\necho %s\n", app)),
		file("etc/os-release", 0o644, []byte("ID=app\n")),
		whiteout("var/cache/old"),
	)
}

func image(t testing.TB, layers ...v1.Layer) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for i, l := range layers {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{Layer: l,
			History: v1.History{Created: v1.Time{Time: testTime.Add(time.Duration(i) * time.Minute)}, CreatedBy: fmt.Sprintf("layer %d", i)}})
		must(t, err)
	}
	cf, err := img.ConfigFile()
	must(t, err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: testTime}
	cf.Config.Env = []string{"PATH=/bin"}
	img, err = mutate.ConfigFile(img, cf)
	must(t, err)
	return img
}

// ---------------------------------------------------------------------------
// Checking a twin: mount its layers, stack them, compare with umoci.

// checkTwin mounts the twin's layers as containerd's EROFS snapshotter
// stacks them and compares the tree with umoci's unpacking of the source.
func checkTwin(t testing.TB, src, twin v1.Image) {
	t.Helper()
	convtest.CompareWithUmoci(t, src, convtest.RawLayers(t, twin, t.TempDir()))
}

func withTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
