package convert_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/internal/testregistry"
	"github.com/ocierofs/ocierofs/oci"
)

// ImageOptions.VerifiedSource: an uncompressed layer read from a registry
// is not hashed again for its diff_id, as go-containerregistry checks its
// blob digest (the same bytes) at the end of the download. The twin is
// the same, byte for byte, as with the hash; a blob whose bytes are not
// its digest's still fails as a source error naming it; and a gzip blob
// that claims to be uncompressed, its diff_id its blob digest, is still
// hashed (the tar is the gunzipped bytes) and refused.
func TestVerifiedSourceDiffID(t *testing.T) {
	reg := sharedRegistry(t)
	raw := convtest.LayerTar(t, convtest.Dir(".", 0o755), convtest.Dir("etc", 0o755),
		convtest.File("etc/os-release", 0o644, []byte("ID=verified\n")),
		convtest.File("big", 0o644, convtest.RandomBytes(9, 200<<10)))
	plain := &convtest.BlobLayer{Blob: raw, Diff: convtest.SHA256(raw), Type: types.OCIUncompressedLayer}
	gz := convtest.Gzip(t, raw)
	liar := &convtest.BlobLayer{Blob: gz, Diff: convtest.SHA256(gz), Type: types.OCIUncompressedLayer}
	repo := uniq("verified/app")
	pushImage(t, ref(t, reg.host, repo+":plain"), convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755)), plain))
	pushImage(t, ref(t, reg.host, repo+":liar"), convtest.Image(t, "amd64", liar))

	var digests []string
	for _, verified := range []bool{false, true} {
		res := mustConvert(t, reg.host+"/"+repo+":plain", reg.host+"/"+uniq("verified/out")+":erofs",
			convert.ImageOptions{VerifiedSource: verified}, oci.Remote{})
		digests = append(digests, res.digest)
		l := res.images[0].Layers[1]
		if l.DiffID != l.Digest {
			t.Errorf("VerifiedSource %v: layer diff_id %s, digest %s: want the same (a raw EROFS layer)", verified, l.DiffID, l.Digest)
		}
	}
	if digests[0] != digests[1] {
		t.Errorf("twin %s with the diff_id hashed, %s with it taken from the verified blob: want the same image", digests[0], digests[1])
	}

	// A byte flipped in the uncompressed blob on its way.
	ld := plain.Blob
	bad := convtest.SHA256(ld)
	p := testregistry.Proxy(t, reg.host)
	p.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method != http.MethodGet || !strings.HasSuffix(resp.Request.URL.Path, "/blobs/"+bad.String()) {
			return nil
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		b[len(b)/2] ^= 0xff
		resp.Body = io.NopCloser(bytes.NewReader(b))
		return nil
	}
	host := testregistry.Serve(t, p)
	_, err := convertRef(context.Background(), t, host+"/"+repo+":plain", reg.host+"/"+uniq("verified/out")+":erofs",
		convert.ImageOptions{VerifiedSource: true}, oci.Remote{})
	var se *convert.SourceError
	if !errors.As(err, &se) || se.Digest != bad {
		t.Errorf("an uncompressed blob with a byte changed: %v, want a *convert.SourceError naming %s", err, bad)
	}

	_, err = convertRef(context.Background(), t, reg.host+"/"+repo+":liar", reg.host+"/"+uniq("verified/out")+":erofs",
		convert.ImageOptions{VerifiedSource: true}, oci.Remote{})
	if err == nil || !strings.Contains(err.Error(), "but the config gives diff_id") {
		t.Errorf("a gzip blob typed uncompressed, its diff_id the blob's digest: %v, want the diff_id refused", err)
	}
}

// A layer blob the target repository already holds is not uploaded again:
// go-containerregistry's WriteLayer, which Publish runs, asks the registry
// (HEAD) before it uploads. The second conversion of an image to another
// tag of the same repository sends no blob at all, only its manifest.
func TestPushSkipsBlobsTheTargetHas(t *testing.T) {
	reg := sharedRegistry(t)
	srcRepo := uniq("skip/src")
	pushImage(t, ref(t, reg.host, srcRepo+":v1"), convtest.Image(t, "amd64", convtest.TestImageLayers(t)...))

	var mu sync.Mutex
	var uploads, heads int // blob upload requests (POST, PATCH, PUT) and blob HEADs
	p := testregistry.Proxy(t, reg.host)
	host := testregistry.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		switch {
		case strings.Contains(r.URL.Path, "/blobs/uploads/"):
			uploads++
		case r.Method == http.MethodHead && strings.Contains(r.URL.Path, "/blobs/"):
			heads++
		}
		mu.Unlock()
		p.ServeHTTP(w, r)
	}))
	dstRepo := uniq("skip/dst")
	first := mustConvert(t, reg.host+"/"+srcRepo+":v1", host+"/"+dstRepo+":a", convert.ImageOptions{}, oci.Remote{})
	mu.Lock()
	firstUploads := uploads
	uploads, heads = 0, 0
	mu.Unlock()
	if firstUploads == 0 {
		t.Fatalf("the first conversion uploaded nothing through the proxy: the count is broken")
	}
	second := mustConvert(t, reg.host+"/"+srcRepo+":v1", host+"/"+dstRepo+":b", convert.ImageOptions{}, oci.Remote{})
	if first.digest != second.digest {
		t.Fatalf("the same source converted to %s, then %s", first.digest, second.digest)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("first conversion: %d blob upload requests; second: %d, and %d blob HEADs", firstUploads, uploads, heads)
	if uploads != 0 || heads == 0 {
		t.Errorf("second conversion into a repository holding every blob: %d upload requests, %d blob HEADs; want none and some (the first made %d)", uploads, heads, firstUploads)
	}
}
