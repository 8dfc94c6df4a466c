package convert_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
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
