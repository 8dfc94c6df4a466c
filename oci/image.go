package oci

import (
	"archive/tar"
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/docker/cli/cli/config"
	"github.com/docker/cli/cli/config/configfile"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/internal/atomicfile"
)

// Credential is a user and password for one registry.
type Credential struct{ Username, Password string }

// Remote holds what talking to registries needs.
type Remote struct {
	// Credentials are the users and passwords of some registries, by the
	// registry's name as a reference gives it (ghcr.io, localhost:5000;
	// docker.io is index.docker.io). Every other registry gets what
	// ~/.docker/config.json and its credential helpers give it, or podman's
	// auth.json where docker has none, as with docker, crane and skopeo. A
	// credential is never sent to a registry it is not given for.
	Credentials map[string]Credential
	// AuthFile, if set, is the one file of logins (docker's config.json,
	// or podman's auth.json: skopeo's --authfile) for the registries
	// Credentials does not name, instead of docker's and podman's own.
	AuthFile string
	// Insecure skips TLS verification.
	Insecure bool
	// Retries is how many times a request that failed with 429, 5xx or a
	// broken connection is tried again (default 5).
	Retries int
	// Transport, if set, is the base HTTP transport (tests use it).
	Transport http.RoundTripper
	// StallTimeout fails a request that moves no bytes for this long, with
	// a StallError that the retries take (default DefaultStallTimeout;
	// negative: never).
	StallTimeout time.Duration
	UserAgent    string

	// ArchiveTempDir is where a docker-archive that comes from a pipe, or
	// compressed, is copied to be read (default $TMPDIR).
	ArchiveTempDir string
	// MaxArchiveFile, if positive, bounds each file of such a copy (a
	// layer's tar is one), and the copy to MaxLayers+1 of them (the
	// layers and the rest): a bound on the disk a small compressed
	// archive can fill, as convert's MaxTarSize is for a layer.
	MaxArchiveFile int64
}

// MaxLayers bounds the layers of an image: overlayfs stacks at most 500
// (OVL_MAX_STACK), so an image of more runs nowhere.
const MaxLayers = 500

// Options returns go-containerregistry options for ctx.
func (r Remote) Options(ctx context.Context) []remote.Option {
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(r.keychain()), remote.WithTransport(r.transport())}
	retries := r.Retries
	if retries == 0 {
		retries = 5
	}
	opts = append(opts,
		remote.WithRetryBackoff(remote.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: retries + 1}),
		remote.WithRetryStatusCodes(http.StatusTooManyRequests, http.StatusInternalServerError,
			http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout),
		remote.WithRetryPredicate(Transient),
	)
	ua := r.UserAgent
	if ua == "" {
		ua = "ocierofs"
	}
	return append(opts, remote.WithUserAgent(ua))
}

// CheckPush reports whether r may push to the repository of ref (a
// registry reference), by starting an upload there and cancelling it:
// before a conversion, so that a target that cannot be reached or written
// fails at once, not after every layer is converted. A registry that
// answers 429 or 5xx, or not within a minute, is left for the push
// itself, which retries.
func (r Remote) CheckPush(ctx context.Context, ref Ref) error {
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := r.tryUpload(tctx, ref.Name.Context())
	var te *transport.Error
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case tctx.Err() != nil:
		return nil // the push will tell
	case errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden):
		reg := ref.Name.Context().RegistryStr()
		return fmt.Errorf("cannot push to %s: %w (log in with docker login %s, or give --dest-creds USER:PASSWORD)", ref.Name.Context(), err, reg)
	case errors.As(err, &te) && (te.StatusCode == http.StatusTooManyRequests || te.StatusCode >= 500):
		return nil
	}
	return fmt.Errorf("cannot push to %s: %w", ref.Name.Context(), err)
}

// tryUpload starts a blob upload in repo, as a push begins, and cancels
// it before returning: no request of the check outlives it (the check of
// go-containerregistry cancels in the background, and takes no context).
func (r Remote) tryUpload(ctx context.Context, repo name.Repository) error {
	auth, err := authn.Resolve(ctx, r.keychain(), repo)
	if err != nil {
		return err
	}
	tr, err := transport.NewWithContext(ctx, repo.Registry, auth, r.transport(), []string{repo.Scope(transport.PushScope)})
	if err != nil {
		return err
	}
	client := &http.Client{Transport: tr}
	start := &url.URL{Scheme: repo.Registry.Scheme(), Host: repo.RegistryStr(), Path: "/v2/" + repo.RepositoryStr() + "/blobs/uploads/"}
	resp, err := request(ctx, client, http.MethodPost, start.String())
	if err != nil {
		return err
	}
	loc := resp.Header.Get("Location")
	if err := transport.CheckError(resp, http.StatusAccepted); err != nil {
		return err
	}
	if u, err := start.Parse(loc); loc != "" && err == nil {
		if resp, err := request(ctx, client, http.MethodDelete, u.String()); err == nil {
			resp.Body.Close() // a registry that keeps the upload lets it expire
		}
	}
	return nil
}

// request sends a request without a body, and drains and closes the answer's
// body but for its first bytes (an error's message).
func request(ctx context.Context, client *http.Client, method, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body = io.NopCloser(bytes.NewReader(b))
	return resp, nil
}

// WithCredential returns r with c as the credential of registry (a name
// as in a reference: docker.io stands for index.docker.io).
func (r Remote) WithCredential(registry string, c Credential) (Remote, error) {
	reg, err := name.NewRegistry(registry)
	if err != nil {
		return r, fmt.Errorf("registry %q: %w", registry, err)
	}
	r.Credentials = maps.Clone(r.Credentials)
	if r.Credentials == nil {
		r.Credentials = map[string]Credential{}
	}
	r.Credentials[reg.RegistryStr()] = c
	return r, nil
}

// keychain gives a registry its credential, or else what the auth file
// or, without one, the default keychain (docker's config, credential
// helpers, podman's auth.json) gives it.
type keychain struct {
	creds    map[string]Credential
	authFile string
}

func (r Remote) keychain() keychain { return keychain{r.Credentials, r.AuthFile} }

func (k keychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	if c, ok := k.creds[res.RegistryStr()]; ok {
		return &authn.Basic{Username: c.Username, Password: c.Password}, nil
	}
	if k.authFile == "" {
		return authn.DefaultKeychain.Resolve(res)
	}
	cf, err := authFiles.load(k.authFile)
	if err != nil {
		return nil, err
	}
	key := res.RegistryStr()
	if key == name.DefaultRegistry {
		key = authn.DefaultAuthKey // Docker Hub's, as docker login writes it
	}
	ac, err := cf.GetAuthConfig(key)
	if err != nil {
		return nil, fmt.Errorf("auth file %s: %w", k.authFile, err)
	}
	if ac.Username == "" && ac.Password == "" && ac.Auth == "" && ac.IdentityToken == "" && ac.RegistryToken == "" {
		return authn.Anonymous, nil
	}
	return authn.FromConfig(authn.AuthConfig{Username: ac.Username, Password: ac.Password, Auth: ac.Auth,
		IdentityToken: ac.IdentityToken, RegistryToken: ac.RegistryToken}), nil
}

// transport is r.Transport, or else go-containerregistry's default
// transport, without TLS verification if r.Insecure; either bounded by
// the stall timeout, and in the size of the manifests it reads.
func (r Remote) transport() http.RoundTripper {
	base := r.Transport
	if base == nil {
		t := remote.DefaultTransport.(*http.Transport).Clone()
		if r.Insecure {
			t.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // asked for by --insecure
		}
		base = t
	}
	if d := cmp.Or(r.StallTimeout, DefaultStallTimeout); d > 0 {
		base = stallTransport{base: base, d: d}
	}
	return manifestBound{base}
}

// authFiles holds the auth files read, so that each is parsed once, not
// at every request; a file changed since is read again.
var authFiles = authFileCache{m: map[string]authFile{}}

type authFileCache struct {
	mu sync.Mutex
	m  map[string]authFile
}

type authFile struct {
	mod  time.Time
	size int64
	cf   *configfile.ConfigFile
}

func (c *authFileCache) load(path string) (*configfile.ConfigFile, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a, ok := c.m[path]; ok && a.mod.Equal(fi.ModTime()) && a.size == fi.Size() {
		return a.cf, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth file: %w", err)
	}
	defer f.Close()
	cf, err := config.LoadFromReader(f)
	if err != nil {
		return nil, fmt.Errorf("auth file %s: %w", path, err)
	}
	c.m[path] = authFile{fi.ModTime(), fi.Size(), cf}
	return cf, nil
}

// Transient reports errors worth retrying: broken or refused connections,
// timeouts (a StallError among them), unexpected ends of a stream, and a
// registry's 429 and 5xx answers.
func Transient(err error) bool {
	var ne net.Error
	var te *transport.Error
	switch {
	case err == nil:
		return false
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case errors.As(err, &ne) && ne.Timeout():
		return true
	case errors.As(err, &te):
		return te.StatusCode == http.StatusTooManyRequests || te.StatusCode >= 500
	}
	return false
}

// ErrNotFound is the error of a reference to nothing.
var ErrNotFound = errors.New("not found")

// identifier says what a reference names in its repository.
func identifier(n name.Reference) string {
	if d, ok := n.(name.Digest); ok {
		return "manifest " + d.DigestStr()
	}
	return fmt.Sprintf("tag %q", n.Identifier())
}

// Artifact is what a reference points at: an index or a single image.
type Artifact struct {
	Ref        Ref
	Descriptor v1.Descriptor
	Index      v1.ImageIndex // nil for a single image
	Image      v1.Image      // nil for an index
}

// Get resolves a reference.
func Get(ctx context.Context, r Ref, rem Remote) (*Artifact, error) {
	switch r.Kind {
	case Layout:
		return getLayout(r)
	case DockerArchive:
		return getArchive(ctx, r, rem)
	}
	desc, err := remote.Get(r.Name, rem.Options(ctx)...)
	if te := (*transport.Error)(nil); errors.As(err, &te) && te.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("%s: %w: repository %s on %s has no %s", r, ErrNotFound,
			r.Name.Context().RepositoryStr(), r.Name.Context().RegistryStr(), identifier(r.Name))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	a := &Artifact{Ref: r, Descriptor: desc.Descriptor}
	if desc.MediaType.IsIndex() {
		a.Index, err = desc.ImageIndex()
	} else {
		a.Image, err = desc.Image()
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	return a, nil
}

// refNameAnnotation names an image inside an OCI layout.
const refNameAnnotation = "org.opencontainers.image.ref.name"

func getLayout(r Ref) (*Artifact, error) {
	p, err := layout.FromPath(r.Path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	var found []v1.Descriptor
	for _, d := range im.Manifests {
		if r.Tag == "" || d.Annotations[refNameAnnotation] == r.Tag {
			found = append(found, d)
		}
	}
	switch {
	case len(found) == 0 && r.Tag != "":
		return nil, fmt.Errorf("%s: no image tagged %q in the layout", r, r.Tag)
	case len(found) == 0:
		return nil, fmt.Errorf("%s: the layout holds no image", r)
	case len(found) > 1 && r.Tag != "":
		return nil, fmt.Errorf("%s: the layout holds %d images tagged %q: oci:DIR:TAG cannot choose", r, len(found), r.Tag)
	case len(found) > 1:
		var tags []string
		untagged := 0
		for _, d := range found {
			if t := d.Annotations[refNameAnnotation]; t != "" {
				tags = append(tags, t)
			} else {
				untagged++
			}
		}
		msg := fmt.Sprintf("%s: the layout holds %d images", r, len(found))
		if len(tags) > 0 {
			msg += fmt.Sprintf(" (tagged %s)", strings.Join(tags, ", "))
		}
		if untagged > 0 {
			msg += fmt.Sprintf(", %d without a tag, which oci:DIR:TAG cannot name", untagged)
		}
		return nil, errors.New(msg + ": name one with oci:DIR:TAG")
	}
	d := found[0]
	a := &Artifact{Ref: r, Descriptor: d}
	if r.Tag == "" {
		// The layout's one image: its Ref names it by its tag.
		a.Ref.Tag = d.Annotations[refNameAnnotation]
	}
	if d.MediaType.IsIndex() {
		a.Index, err = idx.ImageIndex(d.Digest)
	} else {
		a.Image, err = idx.Image(d.Digest)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	return a, nil
}

func getArchive(ctx context.Context, r Ref, rem Remote) (*Artifact, error) {
	var tag *name.Tag
	if r.Tag != "" {
		t, err := name.NewTag(r.Tag)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r, err)
		}
		tag = &t
	}
	open, err := archiveOpener(ctx, r.Path, rem.ArchiveTempDir, rem.MaxArchiveFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	img, err := tarball.Image(open, tag)
	if err != nil {
		if images, terr := archiveTags(open); terr == nil && (tag == nil && len(images) != 1 || tag != nil && !archiveHas(images, *tag)) {
			var tags []string
			for _, t := range images {
				tags = append(tags, cmp.Or(strings.Join(t, " or "), "untagged"))
			}
			return nil, fmt.Errorf("%s: the archive holds %d image(s) (tagged %s): name one with docker-archive:FILE:TAG", r, len(tags), strings.Join(tags, ", "))
		}
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	d, err := descriptorOf(img)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	return &Artifact{Ref: r, Descriptor: d, Image: img}, nil
}

// archiveOpener opens the docker save archive at p for each of its reads:
// its manifest.json, then each config and layer, each read from the
// start. A plain tar file is opened by its path each time. A pipe (docker
// save IMAGE | ocierofs convert docker-archive:/dev/stdin …) or a gzip or
// zstd file is first copied, decompressed, into a file of dir ($TMPDIR if
// empty) that is removed at once and lives while it is open, as skopeo
// reads them; with maxFile, no file in it may be larger, and all of them
// together no larger than MaxLayers+1 such files.
func archiveOpener(ctx context.Context, p, dir string, maxFile int64) (tarball.Opener, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if fi.IsDir() {
		return nil, errors.New("a directory: docker-archive reads a file (docker save -o FILE); an OCI layout is oci:DIR")
	}
	if fi.Mode().IsRegular() {
		if kind := SniffFile(p); kind == "" || kind == "tar" {
			return func() (io.ReadCloser, error) { return os.Open(p) }, nil
		}
	}
	in, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	// A pipe may stall: closing it ends the read that waits when ctx
	// ends (SIGINT).
	defer context.AfterFunc(ctx, func() { in.Close() })()
	br := bufio.NewReaderSize(in, 64<<10)
	head, _ := br.Peek(512) // a FIFO read once: sniffed here, not by SniffFile
	var src io.Reader = br
	if kind := Sniff(head); kind != "" && kind != "tar" {
		zr, err := Decompressor(kind, br)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		src = zr
	}
	if dir == "" {
		dir = os.TempDir()
	}
	tmp, err := atomicfile.Unnamed(dir, "ocierofs-archive-*.tar")
	if err != nil {
		return nil, fmt.Errorf("a copy of the archive: %w", err)
	}
	n, err := copyArchive(tmp, ContextReader(ctx, src), maxFile)
	if err != nil {
		tmp.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("copying the archive into %s: %w", dir, err)
	}
	// tmp is closed when the image that reads it is dropped (os.File's
	// own cleanup).
	return func() (io.ReadCloser, error) { return io.NopCloser(io.NewSectionReader(tmp, 0, n)), nil }, nil
}

// copyArchive copies the tar stream r to f and returns its size. With
// maxFile, it reads the tar headers on the way and stops at a file larger
// than maxFile, and at a copy larger than MaxLayers+1 such files (its
// headers and padding counted), of which at most a tar record follows the
// end-of-archive marker.
func copyArchive(f *os.File, r io.Reader, maxFile int64) (int64, error) {
	if maxFile <= 0 {
		return io.Copy(f, r)
	}
	total := int64(math.MaxInt64)
	if maxFile <= math.MaxInt64/(MaxLayers+1) {
		total = (MaxLayers + 1) * maxFile // the layers, and the rest
	}
	w := &boundWriter{f: f, max: total}
	tr := tar.NewReader(io.TeeReader(r, w))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return w.n, fmt.Errorf("the archive, at offset %d: %w", w.n, err)
		}
		if hdr.Size > maxFile {
			return w.n, fmt.Errorf("the archive's %q (at offset %d): %d bytes, over the bound of %d a file: raise --max-layer-size", hdr.Name, w.n, hdr.Size, maxFile)
		}
		if _, err := io.Copy(io.Discard, tr); err != nil {
			return w.n, fmt.Errorf("the archive's %q: %w", hdr.Name, err)
		}
	}
	// The rest of the last record, which tar pads to 10 KiB with zeros.
	const record = 10 << 10
	if _, err := io.Copy(w, io.LimitReader(r, record)); err != nil {
		return w.n, err
	}
	if n, _ := io.CopyN(io.Discard, r, 1); n > 0 {
		return w.n, fmt.Errorf("the archive: more than a tar record after its end, at offset %d", w.n)
	}
	return w.n, nil
}

// boundWriter writes to f until max bytes.
type boundWriter struct {
	f      *os.File
	n, max int64
}

func (w *boundWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > w.max-w.n {
		return 0, fmt.Errorf("over the bound of %d bytes in all (%d files of --max-layer-size): raise --max-layer-size", w.max, MaxLayers+1)
	}
	n, err := w.f.Write(p)
	w.n += int64(n)
	return n, err
}

// ContextReader is r, ended with ctx: each read fails with ctx's error
// once ctx is done.
func ContextReader(ctx context.Context, r io.Reader) io.Reader { return &ctxReader{ctx, r} }

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// archiveTags lists the repo tags of each image of a docker save archive,
// from its manifest.json.
func archiveTags(open tarball.Opener) ([][]string, error) {
	f, err := open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			return nil, err
		}
		if path.Clean(h.Name) != "manifest.json" {
			continue
		}
		var m []struct{ RepoTags []string }
		if err := json.NewDecoder(io.LimitReader(tr, 16<<20)).Decode(&m); err != nil {
			return nil, err
		}
		var tags [][]string
		for _, e := range m {
			tags = append(tags, e.RepoTags)
		}
		return tags, nil
	}
}

// archiveHas reports whether one of an archive's images has tag t.
func archiveHas(images [][]string, t name.Tag) bool {
	for _, tags := range images {
		for _, s := range tags {
			if at, err := name.NewTag(s); err == nil && at.Name() == t.Name() {
				return true
			}
		}
	}
	return false
}

func descriptorOf(img v1.Image) (v1.Descriptor, error) {
	dg, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	sz, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: dg, Size: sz}, nil
}

// Write publishes an image or an index (exactly one is non-nil) at r. For
// a registry the blobs go first (those the registry has are skipped), the
// manifest and its tag last, so a failure never moves a tag.
func Write(ctx context.Context, r Ref, img v1.Image, idx v1.ImageIndex, rem Remote) error {
	switch r.Kind {
	case Registry:
		var err error
		if img != nil {
			err = remote.Write(r.Name, img, rem.Options(ctx)...)
		} else {
			err = remote.WriteIndex(r.Name, idx, rem.Options(ctx)...)
		}
		if err != nil {
			return fmt.Errorf("push %s: %w", r, err)
		}
		return nil
	case Layout:
		return writeLayout(ctx, r, img, idx)
	}
	return fmt.Errorf("%s: cannot write to a docker-archive", r)
}

// IsIndex reports whether a media type is an index or manifest list.
func IsIndex(mt types.MediaType) bool { return mt.IsIndex() }
