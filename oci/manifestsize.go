package oci

import (
	"fmt"
	"io"
	"net/http"
	"strings"
)

// MaxManifestSize bounds a manifest or index read from a registry, which
// is read into memory: what registries accept (distribution's default).
const MaxManifestSize = 4 << 20

// ManifestTooLargeError is the error of a manifest or index larger than
// MaxManifestSize.
type ManifestTooLargeError struct {
	URL  string
	Size int64 // -1 where only the bytes read told
}

func (e *ManifestTooLargeError) Error() string {
	size := "more than"
	if e.Size >= 0 {
		size = fmt.Sprintf("%d bytes,", e.Size)
	}
	return fmt.Sprintf("%s: %s the %d bytes a manifest may have", describeRequest(http.MethodGet, e.URL), size, MaxManifestSize)
}

// manifestBound refuses a manifest larger than MaxManifestSize: unread
// where the answer says its size, and after MaxManifestSize bytes where it
// does not.
type manifestBound struct{ base http.RoundTripper }

func (t manifestBound) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || !strings.Contains(req.URL.Path, "/manifests/") || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	if resp.ContentLength > MaxManifestSize {
		resp.Body.Close()
		return nil, &ManifestTooLargeError{URL: req.URL.String(), Size: resp.ContentLength}
	}
	resp.Body = &boundedBody{ReadCloser: resp.Body, url: req.URL.String()}
	return resp, nil
}

// boundedBody fails once more than MaxManifestSize bytes came.
type boundedBody struct {
	io.ReadCloser
	read int64
	url  string
}

func (b *boundedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.read += int64(n); b.read > MaxManifestSize {
		return 0, &ManifestTooLargeError{URL: b.url, Size: -1}
	}
	return n, err
}
