package oci

import (
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// TestCredentials: a credential goes to the registry it is given for and
// to no other; docker.io is index.docker.io, as references have it.
func TestCredentials(t *testing.T) {
	// Nothing from this machine's docker or podman logins.
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	t.Setenv("REGISTRY_AUTH_FILE", "")
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	var r Remote
	r, err := r.WithCredential("docker.io", Credential{"hub", "p1"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := r.WithCredential("localhost:5000", Credential{"local", "p2"})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Credentials) != 1 {
		t.Errorf("WithCredential changed the Remote it was called on: %v", r.Credentials)
	}
	for _, tc := range []struct{ ref, user string }{
		{"alpine", "hub"},
		{"docker.io/library/alpine", "hub"},
		{"index.docker.io/x/y:1", "hub"},
		{"localhost:5000/a", "local"},
		{"localhost:5001/a", ""},
		{"ghcr.io/a/b", ""},
	} {
		ref, err := name.ParseReference(tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		a, err := r2.keychain().Resolve(ref.Context())
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := a.Authorization()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Username != tc.user {
			t.Errorf("%s: sent user %q, want %q", tc.ref, cfg.Username, tc.user)
		}
		if tc.user == "" && a != authn.Anonymous {
			t.Errorf("%s: sent %v, want nothing", tc.ref, a)
		}
	}
	if _, err := r.WithCredential("a/b", Credential{}); err == nil {
		t.Error("WithCredential took a repository for a registry")
	}
}
