package oci

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/ocierofs/ocierofs/internal/testregistry"
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

// TestCheckPushLeavesNothingBehind: CheckPush cancels the upload it
// starts before it returns, so no request of it reaches the registry
// after (one that did would be sent with the credentials of a
// conversion that has ended).
func TestCheckPushLeavesNothingBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a registry")
	}
	reg := testregistry.New(t, testregistry.Config{})
	rp := testregistry.Proxy(t, reg.Host)
	var (
		mu       sync.Mutex
		methods  []string
		returned bool
		late     []string
	)
	host := testregistry.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		methods = append(methods, r.Method+" "+r.URL.Path)
		if returned {
			late = append(late, r.Method+" "+r.URL.Path)
		}
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	ref, err := ParseRef(host+"/check/push:1", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := (Remote{}).CheckPush(context.Background(), ref); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	returned = true
	sent := slices.Clone(methods)
	mu.Unlock()
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(late) > 0 {
		t.Errorf("requests after CheckPush returned: %q", late)
	}
	if len(sent) == 0 || !strings.HasPrefix(sent[len(sent)-1], "DELETE /v2/check/push/blobs/uploads/") {
		t.Errorf("CheckPush sent %q: want its upload cancelled last", sent)
	}
}
