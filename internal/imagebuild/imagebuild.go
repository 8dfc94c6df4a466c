// Package imagebuild makes the container image of ocierofs itself from
// its release binaries, without docker: one layer per platform holding
// the programs, the build machine's CA certificates and a non-root user,
// gathered in a multi-platform OCI index. Every tar entry, config field
// and timestamp comes from the inputs alone, so the same binaries, CA
// bundle and build time give the same digest.
package imagebuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user the image runs as: the uid distroless and many base images
// give "nonroot", numeric in the config so that Kubernetes's runAsNonRoot
// can check it without reading /etc/passwd.
const (
	UserName = "ocierofs"
	UID      = 65532
	Home     = "/home/ocierofs"
	// StateDir is where the mirror keeps its queue in a container (the
	// volume of the Kubernetes manifests), owned by the user.
	StateDir = "/var/lib/ocierofs"
	// BinDir holds the programs; Entrypoint is ocierofs in it.
	BinDir = "/usr/local/bin"
	// CACertsPath is where Go's crypto/x509 looks first on Linux.
	CACertsPath = "/etc/ssl/certs/ca-certificates.crt"
)

// Entrypoint is the image's entrypoint: `docker run IMAGE convert …`.
var Entrypoint = []string{BinDir + "/ocierofs"}

// Program is one binary of a platform, installed as BinDir/Name.
type Program struct {
	Name string
	Path string // the file on the build machine
}

// Platform is one entry of the index.
type Platform struct {
	OS, Architecture, Variant string
	Programs                  []Program
}

// Options are the inputs of an image build.
type Options struct {
	// Version is the release, recorded in the labels and annotations.
	Version string
	// Revision is the commit (may be empty); Source the repository URL.
	Revision, Source string
	// Created is every timestamp of the image: tar mtimes, config and
	// history (SOURCE_DATE_EPOCH). Whole seconds, UTC.
	Created time.Time
	// CACerts is the build machine's CA bundle (Debian's ca-certificates:
	// /etc/ssl/certs/ca-certificates.crt).
	CACerts string
	// Platforms, in the order of the index.
	Platforms []Platform
}

// Index builds the multi-platform index. The layers are held in memory
// (gzip-compressed once, when their digest is first asked for).
func Index(opt Options) (v1.ImageIndex, error) {
	if opt.Version == "" {
		return nil, errors.New("imagebuild: no version")
	}
	if len(opt.Platforms) == 0 {
		return nil, errors.New("imagebuild: no platforms")
	}
	opt.Created = opt.Created.UTC().Truncate(time.Second)
	certs, err := os.ReadFile(opt.CACerts)
	if err != nil {
		return nil, fmt.Errorf("imagebuild: CA certificates: %w", err)
	}
	if !bytes.Contains(certs, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("imagebuild: %s holds no PEM certificate", opt.CACerts)
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.Annotations(idx, annotations(opt)).(v1.ImageIndex)
	seen := map[string]bool{}
	for _, p := range opt.Platforms {
		key := p.OS + "/" + p.Architecture + "/" + p.Variant
		if seen[key] {
			return nil, fmt.Errorf("imagebuild: platform %s twice", key)
		}
		seen[key] = true
		img, err := Image(opt, p, certs)
		if err != nil {
			return nil, fmt.Errorf("imagebuild: %s/%s: %w", p.OS, p.Architecture, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
			Platform: &v1.Platform{OS: p.OS, Architecture: p.Architecture, Variant: p.Variant},
		}})
	}
	return idx, nil
}

// annotations are the OCI annotations of the index and the labels of
// each config.
func annotations(opt Options) map[string]string {
	a := map[string]string{
		"org.opencontainers.image.title":       "ocierofs",
		"org.opencontainers.image.description": "converts OCI image layers to EROFS",
		"org.opencontainers.image.version":     opt.Version,
		"org.opencontainers.image.licenses":    "Apache-2.0",
		"org.opencontainers.image.created":     opt.Created.Format(time.RFC3339),
	}
	if opt.Revision != "" {
		a["org.opencontainers.image.revision"] = opt.Revision
	}
	if opt.Source != "" {
		a["org.opencontainers.image.source"] = opt.Source
	}
	return a
}

// Image is the image of one platform: a single layer over nothing.
func Image(opt Options, p Platform, certs []byte) (v1.Image, error) {
	tarBytes, err := rootfs(opt.Created, p.Programs, certs)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created:   v1.Time{Time: opt.Created},
		CreatedBy: "ocierofs internal/imagebuild " + opt.Version,
		Comment:   "ocierofs, ocierofs-mirror, CA certificates, user " + UserName,
	}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Variant = p.OS, p.Architecture, p.Variant
	cf.Created = v1.Time{Time: opt.Created}
	cf.Config = v1.Config{
		Entrypoint: slices.Clone(Entrypoint),
		User:       strconv.Itoa(UID) + ":" + strconv.Itoa(UID),
		WorkingDir: Home,
		Env: []string{
			"PATH=" + BinDir + ":/usr/bin:/bin",
			"HOME=" + Home,
			"SSL_CERT_FILE=" + CACertsPath,
		},
		Labels: annotations(opt),
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs is the tar of the one layer: directories first, parents before
// children, every entry with the same mtime and numeric owners only.
func rootfs(created time.Time, programs []Program, certs []byte) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(hdr *tar.Header, data []byte) error {
		hdr.ModTime = created
		if hdr.Typeflag == tar.TypeReg {
			hdr.Size = int64(len(data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	dir := func(name string, mode int64, uid int) error {
		return add(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, Uid: uid, Gid: uid}, nil)
	}
	file := func(name string, mode int64, data []byte) error {
		return add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode}, data)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", UserName, UID, UID, UserName, Home)
	group := fmt.Sprintf("root:x:0:\n%s:x:%d:\n", UserName, UID)
	steps := []func() error{
		func() error { return dir("etc", 0o755, 0) },
		func() error { return file("etc/group", 0o644, []byte(group)) },
		// Go's resolver reads hosts before DNS when told so, as glibc does.
		func() error { return file("etc/nsswitch.conf", 0o644, []byte("hosts: files dns\n")) },
		func() error { return file("etc/passwd", 0o644, []byte(passwd)) },
		func() error { return dir("etc/ssl", 0o755, 0) },
		func() error { return dir("etc/ssl/certs", 0o755, 0) },
		func() error { return file(CACertsPath[1:], 0o644, certs) },
		func() error { return dir("home", 0o755, 0) },
		func() error { return dir(Home[1:], 0o755, UID) },
		func() error { return dir("root", 0o700, 0) },
		// convert writes its layers to $TMPDIR before they are pushed.
		func() error { return dir("tmp", 0o1777, 0) },
		func() error { return dir("usr", 0o755, 0) },
		func() error { return dir("usr/local", 0o755, 0) },
		func() error { return dir(BinDir[1:], 0o755, 0) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, err
		}
	}
	names := map[string]bool{}
	for _, p := range programs {
		if p.Name == "" || path.Base(p.Name) != p.Name || names[p.Name] {
			return nil, fmt.Errorf("program name %q: empty, a path or given twice", p.Name)
		}
		names[p.Name] = true
		data, err := os.ReadFile(p.Path)
		if err != nil {
			return nil, err
		}
		if err := file(path.Join(BinDir[1:], p.Name), 0o755, data); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"var", "var/lib"} {
		if err := dir(d, 0o755, 0); err != nil {
			return nil, err
		}
	}
	if err := dir(StateDir[1:], 0o750, UID); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
