package oci

import (
	"context"
	"fmt"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// BlobClient returns an HTTP client that may read the blobs of repo: the
// transport convert uses (TLS settings, stall watchdog), logged in with the
// credentials r gives the registry and the pull scope of repo. A lazy
// mount reads byte ranges of blobs through it, which go-containerregistry's
// v1.Layer does not offer.
func (r Remote) BlobClient(ctx context.Context, repo name.Repository) (*http.Client, error) {
	auth, err := authn.Resolve(ctx, r.keychain(), repo)
	if err != nil {
		return nil, fmt.Errorf("%s: credentials: %w", repo, err)
	}
	ua := r.UserAgent
	if ua == "" {
		ua = "ocierofs"
	}
	base := transport.NewUserAgent(r.transport(), ua)
	t, err := transport.NewWithContext(ctx, repo.Registry, auth, base, []string{repo.Scope(transport.PullScope)})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", repo, err)
	}
	return &http.Client{Transport: t}, nil
}

// BlobURL is where the registry of repo serves the blob dg.
func BlobURL(repo name.Repository, dg v1.Hash) string {
	return fmt.Sprintf("%s://%s/v2/%s/blobs/%s", repo.Registry.Scheme(), repo.RegistryStr(), repo.RepositoryStr(), dg)
}
