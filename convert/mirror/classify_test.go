package mirror_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/mirror"
	"github.com/ocierofs/ocierofs/internal/testregistry"
	"github.com/ocierofs/ocierofs/oci"
)

// convertErr converts img with a converter of its own (a converter shares
// the jobs of layers with the same digests) and returns its error.
func convertErr(t *testing.T, what string, opt convert.ImageOptions, img v1.Image) error {
	t.Helper()
	opt.TempDir = t.TempDir()
	conv, err := convert.NewConverter(opt)
	must(t, err)
	defer conv.Close()
	d, err := img.Digest()
	must(t, err)
	_, _, err = conv.Image(withTimeout(t, time.Minute), img, v1.Descriptor{MediaType: types.OCIManifestSchema1, Digest: d})
	if err == nil {
		t.Fatalf("%s: converted without an error", what)
	}
	return err
}

// gzipLayer is a gzip layer of raw, its diff_id raw's digest.
func gzipLayer(t *testing.T, raw []byte) *blobLayer {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	_, err := zw.Write(raw)
	must(t, err)
	must(t, zw.Close())
	return &blobLayer{blob: b.Bytes(), diffID: sha256Of(raw)}
}

// otherMediaType is a layer of a media type convert does not take.
type otherMediaType struct{ *blobLayer }

func (otherMediaType) MediaType() (types.MediaType, error) {
	return "application/vnd.example.not-a-layer", nil
}

// wantClass fails the test unless classify makes err permanent (or not),
// and, for a permanent *convert.SourceError, unless it names digest.
func wantClass(t *testing.T, what string, err error, permanent bool, digest v1.Hash) {
	t.Helper()
	t.Logf("%s: %v", what, err)
	if got := mirror.Permanent(mirror.Classify(err)); got != permanent {
		t.Errorf("%s: permanent %v, want %v: %v", what, got, permanent, err)
	}
	var se *convert.SourceError
	if digest != (v1.Hash{}) && (!errors.As(err, &se) || se.Digest != digest) {
		t.Errorf("%s: want a *convert.SourceError naming %s: %#v", what, digest, err)
	}
}

// The errors convert makes of a source that is wrong in itself fail a
// task at once, whatever their words; a converter's cancelled context is
// worth another attempt.
func TestClassifyConvertErrors(t *testing.T) {
	good := tarLayer(t, dir("etc", 0o755), file("etc/hostname", 0o644, []byte("classify\n")))
	gd, err := good.Digest()
	must(t, err)
	lie := &blobLayer{blob: good.blob, diffID: sha256Of([]byte("not the tar"))}

	err = convertErr(t, "wrong diff_id", convert.ImageOptions{}, image(t, lie))
	wantClass(t, "a layer whose tar is not the config's diff_id", err, true, gd)

	img := image(t, good)
	cf, err := img.ConfigFile()
	must(t, err)
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, cf.RootFS.DiffIDs[0])
	img, err = mutate.ConfigFile(img, cf)
	must(t, err)
	id, err := img.Digest()
	must(t, err)
	wantClass(t, "two diff_ids for one layer", convertErr(t, "diff_ids", convert.ImageOptions{}, img), true, id)

	other := otherMediaType{good}
	wantClass(t, "a layer of an unknown media type", convertErr(t, "media type", convert.ImageOptions{}, image(t, other)), true, gd)

	var many []v1.Layer
	for range convert.MaxLayers + 1 {
		many = append(many, good)
	}
	img = image(t, many...)
	id, err = img.Digest()
	must(t, err)
	wantClass(t, "more layers than overlayfs stacks", convertErr(t, "layers", convert.ImageOptions{}, img), true, id)

	// Layers read whole and refused: the same bytes every time.
	raw, err := io.ReadAll(must2(good.Uncompressed()))
	must(t, err)
	flipped := gzipLayer(t, raw)
	flipped.blob[len(flipped.blob)/2] ^= 0xff
	for what, l := range map[string]*blobLayer{
		"a gzip of a tar cut short":  gzipLayer(t, raw[:700]),
		"a gzip of no tar":           gzipLayer(t, randomBytes(3, 5000)),
		"a gzip with a byte flipped": flipped,
		"no gzip, no tar":            {blob: randomBytes(4, 5000), diffID: sha256Of(randomBytes(4, 5000))},
	} {
		wantClass(t, what, convertErr(t, what, convert.ImageOptions{}, image(t, l)), true, must2(l.Digest()))
	}

	err = convertErr(t, "MaxTarSize", convert.ImageOptions{Layer: convert.Options{MaxTarSize: 1024}}, image(t, good))
	if !errors.As(err, new(*convert.TooLargeError)) {
		t.Errorf("a tar over MaxTarSize: %v, want a *convert.TooLargeError", err)
	}
	wantClass(t, "a tar over MaxTarSize", err, true, v1.Hash{})

	conv, err := convert.NewConverter(convert.ImageOptions{TempDir: t.TempDir()})
	must(t, err)
	defer conv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err = conv.Image(ctx, image(t, good), v1.Descriptor{Digest: gd})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled conversion: %v", err)
	}
	wantClass(t, "a cancelled conversion", err, false, v1.Hash{})
}

// blobProxy serves a registry's blob of digest bad broken: with a byte
// flipped (the whole blob comes, and is not what its digest names), or
// cut off after half of it (a download that broke).
func blobProxy(t *testing.T, upstream string, bad v1.Hash, cut bool) string {
	p := testregistry.Proxy(t, upstream)
	p.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Method != http.MethodGet || !strings.HasSuffix(resp.Request.URL.Path, "/blobs/"+bad.String()) {
			return nil
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if cut {
			resp.Body = testregistry.DropAfter(io.NopCloser(bytes.NewReader(b)), int64(len(b)/2))
			return nil
		}
		b[len(b)/2] ^= 0xff
		resp.Body = io.NopCloser(bytes.NewReader(b))
		return nil
	}
	return testregistry.Serve(t, p)
}

// A layer blob that is not what its digest names fails the task at once;
// one whose download broke, a source that is not there or a converted one
// are classified as oci says.
func TestClassifyRegistryErrors(t *testing.T) {
	reg := startRegistry(t, "")
	layer := baseLayer(t, 7, 64<<10)
	ld, err := layer.Digest()
	must(t, err)
	reg.push(t, "classify/app:1", image(t, layer))
	ctx := withTimeout(t, time.Minute)

	img := image(t, layer)
	cd, err := img.ConfigName()
	must(t, err)
	host := blobProxy(t, reg.host, cd, false)
	ref, err := oci.ParseRef(host+"/classify/app:1", true)
	must(t, err)
	art, err := oci.Get(ctx, ref, oci.Remote{})
	must(t, err)
	err = convertErr(t, "config", convert.ImageOptions{}, art.Image)
	wantClass(t, "a config blob with a byte changed", err, true, cd)

	for _, cut := range []bool{false, true} {
		host := blobProxy(t, reg.host, ld, cut)
		ref, err := oci.ParseRef(host+"/classify/app:1", true)
		must(t, err)
		art, err := oci.Get(ctx, ref, oci.Remote{})
		must(t, err)
		err = convertErr(t, "layer", convert.ImageOptions{}, art.Image)
		if cut {
			wantClass(t, "a layer cut off in every download", err, false, v1.Hash{})
		} else {
			wantClass(t, "a layer blob with a byte changed", err, true, ld)
		}
	}

	ref, err = oci.ParseRef(reg.host+"/classify/app:missing", true)
	must(t, err)
	_, err = oci.Get(ctx, ref, oci.Remote{})
	if !errors.Is(err, oci.ErrNotFound) {
		t.Errorf("a tag that is not there: %v, want oci.ErrNotFound", err)
	}
	wantClass(t, "a tag that is not there", err, true, v1.Hash{})

	twin, err := oci.ParseRef(reg.host+"/classify/app:1-erofs", true)
	must(t, err)
	_, err = oci.DefaultTarget(twin, "-erofs")
	wantClass(t, "a twin as source", err, true, v1.Hash{})
}

// classify looks at types and sentinels, never at words: errors that say
// what the permanent ones say are retried, wrapped ones are not.
func TestClassifyTable(t *testing.T) {
	for _, c := range []struct {
		err       error
		permanent bool
	}{
		{&convert.SourceError{Err: errors.New("layer sha256:ab: unsupported media type \"x\"")}, true},
		{fmt.Errorf("linux/arm64: layer sha256:ab: %w", &convert.SourceError{Err: errors.New("reworded")}), true},
		{fmt.Errorf("layer sha256:ab: tar entry \"big\": %w", &convert.TooLargeError{Max: 1 << 20}), true},
		{fmt.Errorf("r: %w: repository r has no tag \"1\"", oci.ErrNotFound), true},
		{fmt.Errorf("r: %w \"-erofs\"", oci.ErrLoop), true},
		{errors.New("config sha256:ab: content does not match its digest"), false},
		{errors.New("image sha256:ab: 1 layers but 2 diff_ids"), false},
		{errors.New("the uncompressed tar is sha256:ab, but the config gives diff_id sha256:cd"), false},
		{errors.New("layer sha256:ab: unsupported media type \"x\""), false},
		{fmt.Errorf("layer sha256:ab: %w", io.ErrUnexpectedEOF), false},
		{fmt.Errorf("layer sha256:ab: %w", &oci.StallError{Method: "GET", Idle: time.Second}), false},
		{context.DeadlineExceeded, false},
	} {
		if got := mirror.Permanent(mirror.Classify(c.err)); got != c.permanent {
			t.Errorf("%v: permanent %v, want %v", c.err, got, c.permanent)
		}
	}
}

// A task whose source is wrong in itself fails on its first attempt,
// through the layer cache's conversion (cache.Cache.Image) as through Image.
func TestSourceErrorFailsAtOnce(t *testing.T) {
	h := newHarness(t, "p", nil)
	h.startWorker(t, "P")
	good := appLayer(t, "permanent")
	lie := &blobLayer{blob: good.blob, diffID: sha256Of([]byte("not the tar"))}
	d := h.reg.push(t, "wrong/diffid:1", image(t, baseLayer(t, 40, 1000), lie))
	r := h.waitRecord(t, "wrong/diffid", "1", d, time.Minute, func(r *mirror.Record) bool { return r.State == mirror.StateFailed })
	if r.Attempts != 1 || !strings.Contains(r.Error, "but the config gives diff_id") {
		t.Errorf("failed on attempt %d of %d with %q; want attempt 1, naming the diff_id", r.Attempts, h.cfg.Queue.MaxDeliver, r.Error)
	}
}
