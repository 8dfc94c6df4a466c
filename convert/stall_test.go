package convert_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/cache"
	"github.com/ocierofs/ocierofs/convert/check"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/oci"
)

// TestE2EStall: a registry that sends half a blob and then nothing holds
// up convert, cache and check for the stall bound, not forever: the
// download fails with a StallError naming the blob and the registry, and
// is retried.
func TestE2EStall(t *testing.T) {
	reg := sharedRegistry(t)
	src := convtest.Image(t, "amd64", convtest.TestImageLayers(t)...)
	srcRef := ref(t, reg.host, "e2e/stall:v1")
	pushImage(t, srcRef, src)
	want := mustConvert(t, srcRef.String(), "", variant{}.options(), oci.Remote{})
	m, err := src.Manifest()
	must(t, err)
	const bound = 5 * time.Second
	// One layer stalls, once: with two jobs, stalls of all four layers
	// would add up to two bounds before any retry.
	base := m.Layers[0].Digest.String()
	stallOnce := func(rq faultRequest) bool { return rq.N == 1 && rq.Digest == base }
	// within checks that what stalled once took less than twice the bound.
	within := func(t *testing.T, start time.Time) {
		t.Helper()
		took := time.Since(start)
		t.Logf("took %.2fs with a stall bound of %s", took.Seconds(), bound)
		if took > 2*bound {
			t.Errorf("took %s, more than twice the stall bound %s", took, bound)
		}
	}
	stalledOnce := func(t *testing.T, p *faultProxy) {
		t.Helper()
		if n := p.stalls()[base]; n != 1 {
			t.Errorf("layer %s stalled %d times, want 1 (did the fault happen?)", base, n)
		}
	}
	getVia := func(t *testing.T, p *faultProxy, rem oci.Remote) *oci.Artifact {
		t.Helper()
		r, err := oci.ParseRef(p.host+"/e2e/stall:v1", false)
		must(t, err)
		a, err := oci.Get(context.Background(), r, rem)
		must(t, err)
		return a
	}

	t.Run("convert, a layer stalls once", func(t *testing.T) {
		p := newFaultProxy(t, reg.host)
		p.stall = stallOnce
		start := time.Now()
		res, err := convertRef(context.Background(), t, p.host+"/e2e/stall:v1", p.host+"/e2e/stall-once:v1",
			variant{}.options(), oci.Remote{StallTimeout: bound})
		if err != nil {
			t.Fatalf("convert through a registry that stalls once: %v", err)
		}
		within(t, start)
		if res.digest != want.digest {
			t.Errorf("result %s, without faults %s", res.digest, want.digest)
		}
		stalledOnce(t, p)
	})

	t.Run("convert, a layer always stalls", func(t *testing.T) {
		p := newFaultProxy(t, reg.host)
		bad := m.Layers[1].Digest.String()
		p.stall = func(rq faultRequest) bool { return rq.Digest == bad }
		_, err := convertRef(context.Background(), t, p.host+"/e2e/stall:v1", p.host+"/e2e/stall-always:v1",
			variant{}.options(), oci.Remote{StallTimeout: 300 * time.Millisecond})
		if err == nil {
			t.Fatalf("converted although layer %s never downloads", bad)
		}
		t.Logf("error: %v", err)
		for _, s := range []string{bad, "stalled", p.host} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error does not name %q: %v", s, err)
			}
		}
		if n := p.stalls()[bad]; n < 2 {
			t.Errorf("layer fetched %d times: no retry", n)
		}
		requireAbsent(t, ref(t, reg.host, "e2e/stall-always:v1"))
	})

	t.Run("cache, a layer stalls once", func(t *testing.T) {
		p := newFaultProxy(t, reg.host)
		p.stall = stallOnce
		rem := oci.Remote{StallTimeout: bound}
		a := getVia(t, p, rem)
		start := time.Now()
		c, err := cache.New(t.TempDir(), cache.Options{Convert: convert.ImageOptions{TempDir: t.TempDir(), Jobs: 2}})
		must(t, err)
		defer c.Close()
		ls, err := c.Image(context.Background(), a.Image, a.Descriptor)
		if err != nil {
			t.Fatalf("cache through a registry that stalls once: %v", err)
		}
		within(t, start)
		if len(ls) != len(m.Layers) {
			t.Errorf("%d cache layers for %d layers", len(ls), len(m.Layers))
		}
		stalledOnce(t, p)
	})

	t.Run("check, a source layer stalls", func(t *testing.T) {
		p := newFaultProxy(t, reg.host)
		p.stall = stallOnce
		rem := oci.Remote{StallTimeout: bound}
		conv, err := oci.Get(context.Background(), want.target, oci.Remote{})
		must(t, err)
		start := time.Now()
		res, err := check.Converted(context.Background(), conv, getVia(t, p, rem), check.Options{TempDir: t.TempDir()})
		took := time.Since(start)
		t.Logf("check: %v after %.2fs", err, took.Seconds())
		switch {
		case err != nil && !strings.Contains(err.Error(), "stalled"):
			t.Errorf("check failed, but not for the stall: %v", err)
		case err == nil && res.Differences != 0:
			t.Errorf("check found %d differences after a stall", res.Differences)
		}
		if took > 2*bound {
			t.Errorf("took %s, more than twice the stall bound %s", took, bound)
		}
	})
}
