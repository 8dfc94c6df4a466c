package convert_test

// Helpers of the end-to-end tests (image_test.go): a real registry
// (Debian's docker-registry, started by internal/testregistry; none under
// -short), a fault-injecting proxy in front of it, a transport that counts
// blob uploads, an image builder that makes layers with archive/tar and
// gzip, the conversion as the CLI does it, and the mount + umoci comparison
// of a converted image with its source.

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	cryptorand "crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/crypto/bcrypt"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
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
// Building images.

// e2eTime is the default mtime of the test images' entries.
var e2eTime = time.Date(2023, 5, 6, 7, 8, 9, 0, time.UTC)

// e2eEntry is one tar entry of a test layer.
type e2eEntry struct {
	hdr  tar.Header
	data []byte
}

func eDir(name string, mode int64) e2eEntry {
	return e2eEntry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimSuffix(name, "/") + "/", Mode: mode}}
}

func eFile(name string, mode int64, data []byte) e2eEntry {
	return e2eEntry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data))}, data: data}
}

func eSym(name, target string) e2eEntry {
	return e2eEntry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}}
}

func eLink(name, target string) e2eEntry {
	return e2eEntry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target}}
}

func eNode(name string, typ byte, mode, major, minor int64) e2eEntry {
	return e2eEntry{hdr: tar.Header{Typeflag: typ, Name: name, Mode: mode, Devmajor: major, Devminor: minor}}
}

// eWhiteout deletes name (a file or a directory) from the layers below.
func eWhiteout(name string) e2eEntry {
	dir, base := filepath.Split(name)
	return eFile(dir+".wh."+base, 0o644, nil)
}

// eOpaque hides what the layers below have in dir.
func eOpaque(dir string) e2eEntry { return eFile(dir+"/.wh..wh..opq", 0o644, nil) }

func (e e2eEntry) own(uid, gid int) e2eEntry { e.hdr.Uid, e.hdr.Gid = uid, gid; return e }
func (e e2eEntry) at(tm time.Time) e2eEntry  { e.hdr.ModTime = tm; return e }

// xattr adds SCHILY.xattr.NAME.
func (e e2eEntry) xattr(name, value string) e2eEntry {
	recs := map[string]string{}
	for k, v := range e.hdr.PAXRecords {
		recs[k] = v
	}
	recs["SCHILY.xattr."+name] = value
	e.hdr.PAXRecords = recs
	return e
}

// e2eTar writes entries into a tar (PAX, so that sub-second mtimes and
// xattrs survive).
func e2eTar(t testing.TB, entries ...e2eEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if h.ModTime.IsZero() {
			h.ModTime = e2eTime
		}
		h.Format = tar.FormatPAX
		must(t, tw.WriteHeader(&h))
		_, err := tw.Write(e.data)
		must(t, err)
	}
	must(t, tw.Close())
	return buf.Bytes()
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	must(t, err)
	must(t, zw.Close())
	return buf.Bytes()
}

// blobLayer is a layer given by its blob: what a registry serves, with the
// diffID the config claims (go-containerregistry's static layers take the
// blob for the uncompressed content, which is wrong for gzip).
type blobLayer struct {
	blob   []byte
	diffID v1.Hash
	mt     types.MediaType
}

func (l *blobLayer) Digest() (v1.Hash, error) {
	h, _, err := v1.SHA256(bytes.NewReader(l.blob))
	return h, err
}
func (l *blobLayer) DiffID() (v1.Hash, error)            { return l.diffID, nil }
func (l *blobLayer) Size() (int64, error)                { return int64(len(l.blob)), nil }
func (l *blobLayer) MediaType() (types.MediaType, error) { return l.mt, nil }
func (l *blobLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.blob)), nil
}
func (l *blobLayer) Uncompressed() (io.ReadCloser, error) {
	return nil, errors.New("blobLayer: no uncompressed form")
}

func sha256Of(b []byte) v1.Hash {
	s := sha256.Sum256(b)
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(s[:])}
}

// e2eLayer is a tar+gzip layer of entries.
func e2eLayer(t testing.TB, entries ...e2eEntry) v1.Layer {
	t.Helper()
	raw := e2eTar(t, entries...)
	return &blobLayer{blob: gzipBytes(t, raw), diffID: sha256Of(raw), mt: types.OCILayer}
}

// e2eConfig is what the test images carry besides their layers; the
// conversion must keep all of it.
func e2eConfig(cf *v1.ConfigFile, arch string) {
	cf.OS, cf.Architecture = "linux", arch
	cf.Created = v1.Time{Time: e2eTime}
	cf.Author = "ocierofs e2e"
	cf.Config.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "E2E=1"}
	cf.Config.Entrypoint = []string{"/bin/sh", "-c"}
	cf.Config.Cmd = []string{"echo hello"}
	cf.Config.WorkingDir = "/home/user"
	cf.Config.Labels = map[string]string{"org.example.e2e": "yes"}
	cf.History = append(cf.History, v1.History{Created: v1.Time{Time: e2eTime}, CreatedBy: "ENV E2E=1", EmptyLayer: true})
}

// e2eImage stacks layers into an OCI image with one history entry per layer
// and an empty-layer entry.
func e2eImage(t testing.TB, arch string, layers ...v1.Layer) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for i, l := range layers {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:   l,
			History: v1.History{Created: v1.Time{Time: e2eTime.Add(time.Duration(i) * time.Minute)}, CreatedBy: fmt.Sprintf("e2e layer %d", i+1), Comment: "built by the test"},
		})
		must(t, err)
	}
	cf, err := img.ConfigFile()
	must(t, err)
	cf = cf.DeepCopy()
	e2eConfig(cf, arch)
	img, err = mutate.ConfigFile(img, cf)
	must(t, err)
	return img
}

// capNetRaw is a security.capability value (VFS_CAP_REVISION_2) granting
// cap_net_raw, permitted and effective.
var capNetRaw = string([]byte{0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})

// randomBytes is n deterministic pseudo-random bytes.
func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// testImageLayers are the four layers of the image the end-to-end tests
// convert:
//
//  1. a base rootfs: directories with several modes and owners, files (one
//     over several blocks), symlinks, devices, a fifo, etc/apt 0750 root
//     with an xattr, nanosecond mtimes;
//  2. whiteouts deleting a file, a symlink and a directory tree;
//  3. an opaque directory, hard links, xattrs (user.* and
//     security.capability), setuid and setgid files;
//  4. etc/apt/apt.conf with neither etc/ nor etc/apt/ in the tar: the two
//     directories must keep what the layers below say (etc/apt 0750), and
//     likewise home/user (as layer 3 changed it) and var/cache/app (made
//     opaque by layer 3).
func testImageLayers(t testing.TB) []v1.Layer {
	t.Helper()
	tEtc := time.Date(2022, 1, 2, 3, 4, 5, 0, time.UTC)
	tApt := time.Date(2021, 6, 7, 8, 9, 10, 123456789, time.UTC)
	base := []e2eEntry{
		eDir(".", 0o755),
		eDir("bin", 0o755),
		eFile("bin/sh", 0o755, []byte("#!/bin/false\n# not a shell\n")),
		eFile("bin/big", 0o644, randomBytes(1, 300<<10+123)),
		eSym("bin/ls", "sh"),
		eSym("bin/abs", "/etc/passwd"),
		eDir("etc", 0o755).at(tEtc),
		eFile("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n")),
		eFile("etc/motd", 0o644, []byte("deleted by layer 2\n")),
		eFile("etc/shadow", 0o640, []byte("root:*:19000:0:99999:7:::\n")).own(0, 42),
		eDir("etc/apt", 0o750).own(0, 0).at(tApt).xattr("user.e2e.dir", "apt"),
		eFile("etc/apt/sources.list", 0o644, []byte("deb http://deb.debian.org/debian bookworm main\n")),
		eDir("dev", 0o755),
		eNode("dev/null", tar.TypeChar, 0o666, 1, 3),
		eNode("dev/loop9", tar.TypeBlock, 0o660, 7, 9).own(0, 6),
		eNode("dev/fifo", tar.TypeFifo, 0o600, 0, 0),
		eDir("opt", 0o755),
		eDir("opt/legacy", 0o755),
		eFile("opt/legacy/tool", 0o755, []byte("#!/bin/sh\necho legacy\n")),
		eDir("opt/legacy/sub", 0o700),
		eFile("opt/legacy/sub/deep", 0o600, []byte("deep\n")),
		eFile("opt/keep", 0o644, []byte("stays\n")),
		eDir("var", 0o755),
		eDir("var/cache", 0o755),
		eDir("var/cache/app", 0o700).own(1000, 1000),
		eFile("var/cache/app/old.dat", 0o644, []byte("hidden by the opaque directory of layer 3\n")),
		eDir("var/cache/app/olddir", 0o755),
		eFile("var/cache/app/olddir/f", 0o644, []byte("hidden too\n")),
		eDir("home", 0o755),
		eDir("home/user", 0o750).own(1000, 1000).at(e2eTime.Add(500 * time.Millisecond)),
		eFile("home/user/.profile", 0o644, []byte("export PS1='$ '\n")).own(1000, 1000),
		eDir("tmp", 0o1777),
		eDir("root", 0o700),
	}
	whiteouts := []e2eEntry{
		eWhiteout("etc/motd"),
		eWhiteout("opt/legacy"),
		eWhiteout("bin/ls"),
		eFile("opt/added", 0o644, []byte("added by layer 2\n")).at(e2eTime.Add(time.Hour)),
	}
	opaque := []e2eEntry{
		eDir("var/cache/app", 0o755).own(1000, 1000).at(e2eTime.Add(2 * time.Hour)),
		eOpaque("var/cache/app"),
		eFile("var/cache/app/new.dat", 0o644, []byte("only this survives in var/cache/app\n")),
		eDir("usr", 0o755),
		eDir("usr/local", 0o755),
		eDir("usr/local/bin", 0o755).xattr("user.e2e.dir", "bin"),
		eFile("usr/local/bin/hello", 0o755, []byte("#!/bin/sh\necho hello from layer 3\n")),
		eLink("usr/local/bin/hello-link", "usr/local/bin/hello"),
		eLink("usr/local/hello-too", "usr/local/bin/hello"),
		eFile("usr/local/bin/suid", 0o4755, []byte("#!/bin/sh\nid\n")),
		eFile("usr/local/bin/sgid", 0o2755, []byte("#!/bin/sh\nid -g\n")).own(0, 50),
		eFile("usr/local/bin/ping", 0o755, []byte("#!/bin/sh\necho pong\n")).
			xattr("security.capability", capNetRaw).
			xattr("user.e2e.origin", "layer3"),
		eFile("usr/local/bin/tagged", 0o644, []byte("tag\n")).
			xattr("user.e2e.a", "1").xattr("user.e2e.b", strings.Repeat("v", 300)),
		// Layer 1's home/user, changed: layer 4 must take this one.
		eDir("home/user", 0o700).own(1000, 1000).at(e2eTime.Add(3*time.Hour)).xattr("user.e2e.home", "layer3"),
	}
	implied := []e2eEntry{
		// Neither etc/ nor etc/apt/: both are implied by this entry.
		eFile("etc/apt/apt.conf", 0o644, []byte("APT::Install-Recommends \"false\";\n")),
		// home/user as layer 3 left it (not as layer 1 made it).
		eFile("home/user/.history", 0o600, []byte("ls\n")).own(1000, 1000),
		// var/cache/app as layer 3 made it, opaque there but not here: the
		// new.dat of layer 3 must stay visible.
		eFile("var/cache/app/late.dat", 0o644, []byte("added by layer 4\n")),
	}
	return []v1.Layer{e2eLayer(t, base...), e2eLayer(t, whiteouts...), e2eLayer(t, opaque...), e2eLayer(t, implied...)}
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

// ---------------------------------------------------------------------------
// Reading converted images back, mounting them, comparing with umoci.

// rawLayers writes the raw EROFS image of every layer of img into dir
// (decompressing +zstd) and checks that its sha256 is the config's diff_id.
func rawLayers(t testing.TB, img v1.Image, dir string) []string {
	t.Helper()
	m, err := img.Manifest()
	must(t, err)
	cf, err := img.ConfigFile()
	must(t, err)
	if len(cf.RootFS.DiffIDs) != len(m.Layers) {
		t.Fatalf("%d layers but %d diff_ids", len(m.Layers), len(cf.RootFS.DiffIDs))
	}
	var files []string
	for i, d := range m.Layers {
		l, err := img.LayerByDigest(d.Digest)
		must(t, err)
		rc, err := l.Compressed()
		must(t, err)
		blob, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("layer %d %s: download: %v", i, d.Digest, err)
		}
		if got := sha256Of(blob); got != d.Digest {
			t.Fatalf("layer %d: blob hashes to %s, descriptor says %s", i, got, d.Digest)
		}
		raw := blob
		if strings.HasSuffix(string(d.MediaType), "+zstd") {
			zr, err := zstd.NewReader(bytes.NewReader(blob))
			must(t, err)
			raw, err = io.ReadAll(zr)
			zr.Close()
			if err != nil {
				t.Fatalf("layer %d %s: zstd: %v", i, d.Digest, err)
			}
		}
		if got := sha256Of(raw); got != cf.RootFS.DiffIDs[i] {
			t.Errorf("layer %d %s: diff_id %s, but the raw EROFS image hashes to %s", i, d.Digest, cf.RootFS.DiffIDs[i], got)
		}
		f := filepath.Join(dir, fmt.Sprintf("layer%d.erofs", i))
		must(t, os.WriteFile(f, raw, 0o644))
		files = append(files, f)
	}
	return files
}

// mountStack mounts every layer image (mount -t erofs -o loop,ro) and
// stacks them with overlayfs, the first image at the bottom, as containerd's
// EROFS snapshotter does. It returns the merged directory.
func mountStack(t testing.TB, layers []string) string {
	t.Helper()
	roundtrip.RequireMount(t)
	if len(layers) > 1 && !hasFilesystem("overlay") {
		exec.Command("modprobe", "overlay").Run()
		if !hasFilesystem("overlay") {
			t.Skip("cannot stack layers: no overlay in /proc/filesystems, even after modprobe overlay")
		}
	}
	var mnts []string
	for _, l := range layers {
		mnts = append(mnts, roundtrip.Mount(t, l))
	}
	if len(mnts) == 1 {
		return mnts[0] // overlayfs wants two lower directories without an upper one
	}
	lower := make([]string, len(mnts))
	for i, m := range mnts {
		lower[len(mnts)-1-i] = m // lowerdir=TOP:…:BOTTOM
	}
	merged := t.TempDir()
	opts := "lowerdir=" + strings.Join(lower, ":")
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", opts, merged).CombinedOutput(); err != nil {
		t.Fatalf("mount -t overlay overlay -o %s %s: %v: %s", opts, merged, err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() { roundtrip.Unmount(t, merged) })
	return merged
}

// hasFilesystem reports whether the kernel lists fs in /proc/filesystems.
func hasFilesystem(fs string) bool {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[len(f)-1] == fs {
			return true
		}
	}
	return false
}

// umociRootfs unpacks img with umoci (as root) and returns the rootfs.
func umociRootfs(t testing.TB, img v1.Image) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: no umoci; make test runs it")
	}
	bin, err := exec.LookPath("umoci")
	if err != nil {
		t.Skip("no umoci (Debian package umoci)")
	}
	dir := t.TempDir()
	p, err := layout.Write(filepath.Join(dir, "layout"), empty.Index)
	must(t, err)
	must(t, p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "src"})))
	bundle := filepath.Join(dir, "bundle")
	out, err := exec.Command(bin, "unpack", "--image", filepath.Join(dir, "layout")+":src", bundle).CombinedOutput()
	if err != nil {
		t.Fatalf("umoci unpack: %v: %s", err, bytes.TrimSpace(out))
	}
	return filepath.Join(bundle, "rootfs")
}

// compareWithUmoci mounts the converted layers, stacks them and compares
// the merged tree with umoci's unpacking of the source image.
func compareWithUmoci(t testing.TB, src v1.Image, layers []string) (want, got *fstree.Tree) {
	t.Helper()
	merged := mountStack(t, layers)
	want = treeFromDir(t, umociRootfs(t, src))
	got = treeFromDir(t, merged)
	diffs := fstree.Diff(want, got, fstree.DiffOptions{
		Ignore: func(p, field string) bool {
			// overlayfs hides its own trusted.overlay.* xattrs (opaque,
			// origin) from listxattr; umoci, rootless, records owners in
			// user.rootlesscontainers. Neither is the image's content.
			// Everything else fstree compares (type, mode, uid, gid,
			// mtime, size, content, symlink targets, device numbers,
			// other xattrs, hard-link groups) must be the same, the root
			// directory included: its metadata comes from the top layer,
			// which takes it from the layers below. fstree does not
			// compare st_nlink, st_ino or st_dev, which overlayfs reports
			// differently from a plain directory tree.
			return strings.HasPrefix(field, "xattr:trusted.overlay.") || field == "xattr:user.rootlesscontainers"
		},
	})
	reportDiff(t, "merged overlay vs umoci unpack", diffs)
	t.Logf("merged overlay of %d layers vs umoci unpack: %d paths, %d hard-link groups, %d differences",
		len(layers), got.Len(), len(got.LinkGroups()), len(diffs))
	if want.Len() < 2 {
		t.Errorf("umoci unpacked %d paths: nothing compared", want.Len())
	}
	return want, got
}
