package convert_test

// Helpers of the end-to-end tests (image_test.go): a real registry
// (Debian's docker-registry, started by internal/testregistry; none under
// -short), a fault-injecting proxy in front of it, a transport that counts
// blob uploads and the conversion as the CLI does it. The test images and
// the mount + umoci comparison of a converted image with its source are
// convert/internal/convtest's.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	cryptorand "crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"golang.org/x/crypto/bcrypt"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/internal/testregistry"
	"github.com/ocierofs/ocierofs/oci"
)

// TestMain stops the registry shared by the tests of this binary.
func TestMain(m *testing.M) {
	code := m.Run()
	testregistry.StopShared()
	os.Exit(code)
}

// ---------------------------------------------------------------------------
// The registry.

// testRegistry is one docker-registry process (internal/testregistry);
// host is its 127.0.0.1:PORT (127.0.0.2 with TLS).
type testRegistry struct {
	*testregistry.Registry
	host string
}

func wrapRegistry(r *testregistry.Registry) *testRegistry {
	return &testRegistry{Registry: r, host: r.Host}
}

// sharedRegistry returns the binary's registry (no auth). Under -short it
// skips the test: the fast tier starts no registry.
func sharedRegistry(t testing.TB) *testRegistry {
	t.Helper()
	return wrapRegistry(testregistry.Shared(t))
}

// tlsIP is the address of HTTPS test registries.
const tlsIP = testregistry.TLSIP

// tlsRegistry starts a registry of the test's own that serves HTTPS with a
// fresh self-signed certificate for tlsIP, stopped when the test ends.
func tlsRegistry(t testing.TB) *testRegistry {
	t.Helper()
	testregistry.Binary(t)
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), cryptorand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "ocierofs e2e"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP(tlsIP)},
	}
	der, err := x509.CreateCertificate(cryptorand.Reader, tmpl, tmpl, &key.PublicKey, key)
	must(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	cert, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	must(t, os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	must(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	return wrapRegistry(testregistry.New(t, testregistry.Config{Cert: cert, Key: keyFile}))
}

// authRegistry starts a registry of the test's own that wants user:password
// (htpasswd, bcrypt), stopped when the test ends.
func authRegistry(t testing.TB, user, password string) *testRegistry {
	t.Helper()
	testregistry.Binary(t)
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	must(t, err)
	htpasswd := filepath.Join(t.TempDir(), "htpasswd")
	must(t, os.WriteFile(htpasswd, []byte(user+":"+string(hash)+"\n"), 0o600))
	return wrapRegistry(testregistry.New(t, testregistry.Config{Htpasswd: htpasswd}))
}

var uniqN atomic.Int64

// uniq makes a repository name of its own for each call, so that a test
// that wants its blobs uploaded gets a repository without them (the
// registry lives as long as the test binary: think of -count=2).
func uniq(repo string) string { return fmt.Sprintf("%s-%d", repo, uniqN.Add(1)) }

// ref is a registry reference on host.
func ref(t testing.TB, host, repoTag string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(host + "/" + repoTag)
	must(t, err)
	return r
}

// direct are the go-containerregistry options of the test's own pushes and
// reads: straight to the registry, no retries that could hide a fault.
func direct(extra ...remote.Option) []remote.Option {
	return append([]remote.Option{remote.WithTransport(http.DefaultTransport.(*http.Transport).Clone())}, extra...)
}

func pushImage(t testing.TB, r name.Reference, img v1.Image, extra ...remote.Option) v1.Hash {
	t.Helper()
	if err := remote.Write(r, img, direct(extra...)...); err != nil {
		t.Fatalf("push %s: %v", r, err)
	}
	dg, err := img.Digest()
	must(t, err)
	return dg
}

func pushIndex(t testing.TB, r name.Reference, idx v1.ImageIndex) v1.Hash {
	t.Helper()
	if err := remote.WriteIndex(r, idx, direct()...); err != nil {
		t.Fatalf("push %s: %v", r, err)
	}
	dg, err := idx.Digest()
	must(t, err)
	return dg
}

// requireAbsent checks that nothing is tagged r (HEAD answers 404).
func requireAbsent(t testing.TB, r name.Reference, extra ...remote.Option) {
	t.Helper()
	d, err := remote.Head(r, direct(extra...)...)
	if err == nil {
		t.Errorf("%s exists after a failed conversion (digest %s): a tag moved to a half-converted image", r, d.Digest)
		return
	}
	var te *transport.Error
	if !errors.As(err, &te) || te.StatusCode != http.StatusNotFound {
		t.Errorf("HEAD %s: want 404, got %v", r, err)
	}
}

// ---------------------------------------------------------------------------
// Fault injection and request counting.

// faultProxy is a reverse proxy on 127.0.0.1 in front of a registry that
// breaks requests as its rules say. Each rule sees the request's class and
// how many requests of that key (method, class, digest or path) came
// before, so "the first time" rules are easy to write.
type faultProxy struct {
	host string
	rp   *httputil.ReverseProxy

	// status, if set, may answer a request with an error status instead of
	// passing it on (0: pass).
	status func(rq faultRequest) int
	// drop, if set, says whether to drop the connection in the middle of
	// the body of a blob download.
	drop func(rq faultRequest) bool
	// stall, if set, says whether to send half of a blob download and then
	// nothing more, until the client goes away.
	stall func(rq faultRequest) bool

	mu      sync.Mutex
	seen    map[string]int
	dropped map[string]int // blob digest → connections dropped
	stalled map[string]int // blob digest → downloads stalled
	failed  []string       // "METHOD path → status" of each injected error
}

// faultRequest is what a rule knows about a request.
type faultRequest struct {
	Method string
	Class  string // "ping", "manifest", "blob", "upload" or "other"
	Digest string // of a blob (or a manifest by digest)
	Path   string
	N      int // 1 for the first request of this method, class and digest
}

func newFaultProxy(t testing.TB, upstream string) *faultProxy {
	t.Helper()
	p := &faultProxy{seen: map[string]int{}, dropped: map[string]int{}, stalled: map[string]int{}}
	p.rp = testregistry.Proxy(t, upstream)
	p.rp.ModifyResponse = func(resp *http.Response) error {
		ctx := resp.Request.Context()
		if dg, ok := ctx.Value(dropKey{}).(string); ok && resp.StatusCode == http.StatusOK {
			resp.Body = testregistry.DropAfter(resp.Body, resp.ContentLength/2)
			p.mu.Lock()
			p.dropped[dg]++
			p.mu.Unlock()
		}
		if dg, ok := ctx.Value(stallKey{}).(string); ok && resp.StatusCode == http.StatusOK {
			resp.Body = testregistry.StallAfter(ctx, resp.Body, resp.ContentLength/2)
			p.mu.Lock()
			p.stalled[dg]++
			p.mu.Unlock()
		}
		return nil
	}
	p.host = testregistry.Serve(t, p)
	return p
}

type dropKey struct{}

type stallKey struct{}

func classify(r *http.Request) (class, digest string) {
	p := r.URL.Path
	switch {
	case p == "/v2/" || p == "/v2":
		return "ping", ""
	case strings.Contains(p, "/blobs/uploads"):
		return "upload", ""
	case strings.Contains(p, "/blobs/"):
		return "blob", p[strings.LastIndex(p, "/")+1:]
	case strings.Contains(p, "/manifests/"):
		id := p[strings.LastIndex(p, "/")+1:]
		if strings.HasPrefix(id, "sha256:") {
			return "manifest", id
		}
		return "manifest", ""
	}
	return "other", ""
}

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	class, dg := classify(r)
	key := r.Method + " " + class + " " + dg
	if class == "manifest" && dg == "" {
		key += r.URL.Path
	}
	p.mu.Lock()
	p.seen[key]++
	rq := faultRequest{Method: r.Method, Class: class, Digest: dg, Path: r.URL.Path, N: p.seen[key]}
	p.mu.Unlock()
	if p.status != nil {
		if code := p.status(rq); code != 0 {
			p.mu.Lock()
			p.failed = append(p.failed, fmt.Sprintf("%s %s → %d", r.Method, r.URL.Path, code))
			p.mu.Unlock()
			// Drain what the client sends, so that it reads the answer.
			io.Copy(io.Discard, r.Body)
			http.Error(w, http.StatusText(code), code)
			return
		}
	}
	if p.drop != nil && r.Method == http.MethodGet && class == "blob" && p.drop(rq) {
		r = r.WithContext(context.WithValue(r.Context(), dropKey{}, dg))
	}
	if p.stall != nil && r.Method == http.MethodGet && class == "blob" && p.stall(rq) {
		r = r.WithContext(context.WithValue(r.Context(), stallKey{}, dg))
	}
	p.rp.ServeHTTP(w, r)
}

func (p *faultProxy) stats() (dropped map[string]int, failed []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := map[string]int{}
	for k, v := range p.dropped {
		d[k] = v
	}
	return d, append([]string(nil), p.failed...)
}

func (p *faultProxy) stalls() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.stalled)
}

// countingTransport counts the requests that upload blobs (POST, PATCH and
// PUT under /blobs/uploads/) and manifests.
type countingTransport struct {
	base http.RoundTripper

	mu              sync.Mutex
	blobUploads     []string
	manifestPuts    int
	requestsByClass map[string]int
}

func newCountingTransport() *countingTransport {
	return &countingTransport{base: http.DefaultTransport.(*http.Transport).Clone(), requestsByClass: map[string]int{}}
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	class, _ := classify(r)
	c.mu.Lock()
	c.requestsByClass[r.Method+" "+class]++
	switch {
	case class == "upload" && (r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodPatch):
		c.blobUploads = append(c.blobUploads, r.Method+" "+r.URL.Path)
	case class == "manifest" && r.Method == http.MethodPut:
		c.manifestPuts++
	}
	c.mu.Unlock()
	return c.base.RoundTrip(r)
}

func (c *countingTransport) uploads() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.blobUploads...)
}

// ---------------------------------------------------------------------------
// Converting, as `ocierofs convert` does.

// e2eResult is one conversion's outcome.
type e2eResult struct {
	target  oci.Ref
	digest  string
	index   bool
	images  []*convert.ImageReport
	seconds float64
}

// convertRef runs the CLI's code path (cmd/ocierofs/convert.go runConvert):
// parse, refuse a converted source, default the target, upload layers as
// soon as they are converted, publish the manifest last.
func convertRef(ctx context.Context, t testing.TB, source, target string, opt convert.ImageOptions, rem oci.Remote) (*e2eResult, error) {
	t.Helper()
	start := time.Now()
	const suffix = "-erofs"
	src, err := oci.ParseRef(source, false)
	if err != nil {
		return nil, err
	}
	if oci.HasSuffix(src, suffix) {
		return nil, fmt.Errorf("%s: %w %q: refusing to convert a converted image", src, oci.ErrLoop, suffix)
	}
	var dst oci.Ref
	if target != "" {
		dst, err = oci.ParseRef(target, false)
	} else {
		dst, err = oci.DefaultTarget(src, suffix)
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if opt.Log == nil {
		opt.Log = func(s string) { t.Logf("ocierofs: %s", s) }
	}
	if opt.TempDir == "" {
		opt.TempDir = t.TempDir()
	}
	if dst.Kind == oci.Registry {
		repo := dst.Name.Context()
		// Clipped: Publish runs in several layer jobs at once, and they
		// must not append into one shared array (the CLI does; see the
		// report of TestConvertCLIRegistry under -race).
		ropts := slices.Clip(rem.Options(ctx))
		opt.Publish = func(ctx context.Context, l v1.Layer) error {
			return remote.WriteLayer(repo, l, append(ropts, remote.WithContext(ctx))...)
		}
	}
	art, err := oci.Get(ctx, src, rem)
	if err != nil {
		return nil, err
	}
	conv, err := convert.NewConverter(opt)
	if err != nil {
		return nil, err
	}
	defer conv.Close()
	tw, err := conv.WriteTwin(ctx, art, dst, rem, convert.TwinHooks{})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	res := &e2eResult{target: dst, index: tw.Index, digest: tw.Digest, images: tw.Images}
	res.seconds = time.Since(start).Seconds()
	return res, nil
}

// mustConvert is convertRef that fails the test on an error.
func mustConvert(t testing.TB, source, target string, opt convert.ImageOptions, rem oci.Remote) *e2eResult {
	t.Helper()
	res, err := convertRef(context.Background(), t, source, target, opt, rem)
	if err != nil {
		t.Fatalf("convert %s → %s: %v", source, target, err)
	}
	return res
}

// logTimings puts the wall time and the per-layer timings of the report in
// the test log.
func logTimings(t testing.TB, what string, res *e2eResult) {
	t.Helper()
	t.Logf("%s: whole conversion %.3fs wall (%s@%s)", what, res.seconds, res.target, res.digest)
	for _, im := range res.images {
		for i, l := range im.Layers {
			t.Logf("  %s layer %d %s: convert %.3fs, upload %.3fs, %d → %d bytes, %d entries, %s",
				im.Platform, i+1, shortDigest(l.Source), l.ConvertSeconds, l.UploadSeconds, l.SourceSize, l.Size, l.Entries, l.MediaType)
		}
	}
}

func shortDigest(s string) string {
	if len(s) > 19 {
		return s[:19]
	}
	return s
}
