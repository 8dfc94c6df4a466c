// Package oci finds, reads and writes container images: registry
// references (with Docker Hub defaults, like docker and crane), OCI image
// layouts ("oci:DIR[:TAG]") and docker-archive tarballs
// ("docker-archive:FILE"). It knows images and blobs, not filesystems.
//
//	src, err := oci.ParseRef("alpine", false)    // index.docker.io/library/alpine:latest (TLS)
//	art, err := oci.Get(ctx, src, oci.Remote{})  // an index or a manifest
package oci

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Kind is where an image lives.
type Kind int

const (
	Registry      Kind = iota
	Layout             // an OCI image layout directory
	DockerArchive      // a `docker save` tarball
)

// Ref is a parsed image reference of any kind.
type Ref struct {
	Kind Kind
	// Name is the registry reference (Kind Registry).
	Name name.Reference
	// Path is the layout directory or archive file; Tag selects an image in
	// it (a layout's org.opencontainers.image.ref.name, an archive's repo tag).
	Path string
	Tag  string
}

// ParseRef parses "oci:DIR[:TAG]", "docker-archive:FILE[:TAG]" or a
// registry reference ("alpine", "host:5000/repo:tag", "repo@sha256:…").
// insecure allows plain HTTP for the registry.
func ParseRef(s string, insecure bool) (Ref, error) {
	switch {
	case strings.HasPrefix(s, "oci:"):
		p, tag := splitPathTag(s[len("oci:"):])
		if p == "" {
			return Ref{}, fmt.Errorf("reference %q: empty layout path", s)
		}
		return Ref{Kind: Layout, Path: p, Tag: tag}, nil
	case strings.HasPrefix(s, "docker-archive:"):
		p, tag := splitArchiveRef(s[len("docker-archive:"):])
		if p == "" {
			return Ref{}, fmt.Errorf("reference %q: empty archive path", s)
		}
		return Ref{Kind: DockerArchive, Path: p, Tag: tag}, nil
	}
	if i := strings.Index(s, "://"); i >= 0 {
		return Ref{}, fmt.Errorf("reference %q: a reference has no scheme: give %s (with --plain-http for a registry over plain HTTP)", s, s[i+3:])
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	n, err := name.ParseReference(s, opts...)
	if err != nil {
		return Ref{}, fmt.Errorf("reference %q: %w", s, err)
	}
	return Ref{Kind: Registry, Name: n}, nil
}

// splitPathTag splits "DIR:TAG"; a colon inside the last path element is
// the tag separator, so paths with colons in directory names still work.
func splitPathTag(s string) (string, string) {
	i := strings.LastIndexByte(s, ':')
	if i < 0 || strings.Contains(s[i+1:], "/") {
		return s, ""
	}
	return s[:i], s[i+1:]
}

// splitArchiveRef splits "FILE[:REPO:TAG]" as skopeo does: the image name
// after the file is a docker reference, which has colons of its own. The
// file is the shortest prefix that exists as a file; when none does (the
// error comes when it is opened), the first colon separates them.
func splitArchiveRef(s string) (string, string) {
	for i := 0; i < len(s); i++ {
		if s[i] != ':' {
			continue
		}
		if st, err := os.Stat(s[:i]); err == nil && !st.IsDir() {
			return s[:i], s[i+1:]
		}
	}
	if _, err := os.Stat(s); err == nil {
		return s, ""
	}
	if p, tag, ok := strings.Cut(s, ":"); ok {
		return p, tag
	}
	return s, ""
}

func (r Ref) String() string {
	switch r.Kind {
	case Layout:
		return joinTag("oci:"+r.Path, r.Tag)
	case DockerArchive:
		return joinTag("docker-archive:"+r.Path, r.Tag)
	}
	if r.Name == nil {
		return ""
	}
	return r.Name.String()
}

func joinTag(s, tag string) string {
	if tag == "" {
		return s
	}
	return s + ":" + tag
}

// ErrLoop is returned when a source already carries the target suffix: a
// mirror converting every push must not convert its own output.
var ErrLoop = errors.New("source tag already ends with the target suffix")

// DefaultTarget is where the converted image of src goes when no target is
// given: the same repository (or layout) with the tag plus suffix. A source
// by digest gets the tag "sha256-<hex>" plus suffix, one by tag and digest
// (repo:tag@sha256:…) its tag plus suffix.
func DefaultTarget(src Ref, suffix string) (Ref, error) {
	if suffix == "" {
		return Ref{}, errors.New("empty tag suffix")
	}
	switch src.Kind {
	case Layout:
		tag := src.Tag
		if tag == "" {
			tag = "latest"
		}
		if strings.HasSuffix(tag, suffix) {
			return Ref{}, fmt.Errorf("%s: %w %q", src, ErrLoop, suffix)
		}
		return Ref{Kind: Layout, Path: src.Path, Tag: tag + suffix}, nil
	case DockerArchive:
		return Ref{}, fmt.Errorf("%s: give a target (oci:DIR or a registry reference)", src)
	}
	switch n := src.Name.(type) {
	case name.Tag:
		if strings.HasSuffix(n.TagStr(), suffix) {
			return Ref{}, fmt.Errorf("%s: %w %q", src, ErrLoop, suffix)
		}
		// Repository.Tag does not check the tag; a registry refuses one
		// over 128 characters only at the upload, as a 404.
		if _, err := name.NewTag("x:" + n.TagStr() + suffix); err != nil {
			return Ref{}, fmt.Errorf("%s: the target tag %q: %w", src, n.TagStr()+suffix, err)
		}
		return Ref{Kind: Registry, Name: n.Context().Tag(n.TagStr() + suffix)}, nil
	case name.Digest:
		// repo:tag@digest: the tag the user named (go-containerregistry
		// keeps only the digest).
		base, _, _ := strings.Cut(n.String(), "@")
		if i := strings.LastIndex(base, ":"); i > strings.LastIndex(base, "/") {
			return DefaultTarget(Ref{Kind: Registry, Name: n.Context().Tag(base[i+1:])}, suffix)
		}
		hex := strings.ReplaceAll(n.DigestStr(), ":", "-")
		return Ref{Kind: Registry, Name: n.Context().Tag(hex + suffix)}, nil
	}
	return Ref{}, fmt.Errorf("%s: unsupported reference", src)
}

// HasSuffix reports whether a reference's tag ends with suffix.
func HasSuffix(r Ref, suffix string) bool {
	if t, ok := r.Name.(name.Tag); ok && r.Kind == Registry {
		return strings.HasSuffix(t.TagStr(), suffix)
	}
	return r.Tag != "" && strings.HasSuffix(r.Tag, suffix)
}
