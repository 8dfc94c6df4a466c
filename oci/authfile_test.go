package oci

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// TestAuthFileReadOnce: the auth file is parsed once, not at every
// request, and again once it changes.
func TestAuthFileReadOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "auth.json")
	write := func(user string, mod time.Time) {
		auth := base64.StdEncoding.EncodeToString([]byte(user + ":pw"))
		if err := os.WriteFile(path, fmt.Appendf(nil, `{"auths":{"reg.example":{"auth":%q}}}`, auth), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mod, mod); err != nil {
			t.Fatal(err)
		}
	}
	user := func() string {
		t.Helper()
		reg, _ := name.NewRegistry("reg.example")
		a, err := Remote{AuthFile: path}.keychain().Resolve(reg)
		if err != nil {
			t.Fatal(err)
		}
		c, err := a.Authorization()
		if err != nil {
			t.Fatal(err)
		}
		return c.Username
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	write("alice", t0)
	first := user()
	cached := authFiles.m[path].cf
	if first != "alice" || user() != "alice" || authFiles.m[path].cf != cached {
		t.Errorf("read %q, then parsed again: %v", first, authFiles.m[path].cf != cached)
	}
	write("bob", t0.Add(time.Second))
	if got := user(); got != "bob" {
		t.Errorf("after the file changed: user %q, want bob", got)
	}
}
