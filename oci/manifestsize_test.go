package oci

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// TestManifestTooLarge: a manifest answer larger than MaxManifestSize is
// refused unread where its size is given, and after MaxManifestSize bytes
// where it is not (the registry library alone reads up to 100 MB).
func TestManifestTooLarge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		length string // Content-Length; "" for a chunked answer
	}{
		{"claims 2 GiB", strconv.Itoa(2 << 30)},
		{"no length", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if !strings.Contains(r.URL.Path, "/manifests/") {
					w.WriteHeader(http.StatusOK) // the ping
					return
				}
				w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
				if tc.length != "" {
					w.Header().Set("Content-Length", tc.length)
				}
				chunk := []byte(strings.Repeat(" ", 64<<10))
				for sent.Load() < 200<<20 {
					n, err := w.Write(chunk)
					sent.Add(int64(n))
					if err != nil {
						return
					}
				}
			}))
			defer srv.Close()
			host := strings.TrimPrefix(srv.URL, "http://")
			ref, err := ParseRef(host+"/big/manifest:v1", true)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Get(context.Background(), ref, Remote{})
			var tl *ManifestTooLargeError
			if !errors.As(err, &tl) {
				t.Fatalf("err = %v, want a ManifestTooLargeError", err)
			}
			if !strings.Contains(err.Error(), "manifest v1 of big/manifest on registry "+host) {
				t.Errorf("error does not name the manifest and registry: %v", err)
			}
			srv.CloseClientConnections()
			if n := sent.Load(); n > 32<<20 {
				t.Errorf("the registry sent %d MiB before the refusal", n>>20)
			}
		})
	}
}
