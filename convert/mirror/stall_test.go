package mirror_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/convert/mirror"
	"github.com/ocierofs/ocierofs/internal/testregistry"
)

// stallProxy is a proxy in front of the registry that sends half of the
// blob digest, at its first download (always: every one), and then nothing
// until the client goes away.
func stallProxy(t testing.TB, upstream, digest string, always bool) (host string, stalls *atomic.Int32) {
	stalls = new(atomic.Int32)
	rp := testregistry.Proxy(t, upstream)
	rp.ModifyResponse = func(resp *http.Response) error {
		rq := resp.Request
		if rq.Method != http.MethodGet || !strings.HasSuffix(rq.URL.Path, "/blobs/"+digest) || resp.StatusCode != http.StatusOK {
			return nil
		}
		if n := stalls.Add(1); n == 1 || always {
			resp.Body = testregistry.StallAfter(rq.Context(), resp.Body, resp.ContentLength/2)
		}
		return nil
	}
	return testregistry.Serve(t, rp), stalls
}

// TestServeStall: a worker whose registry stops sending in the middle of a
// layer does not keep its task running (it reports progress all along, so
// the ack wait would never end it): the download fails after the stall
// bound and is retried, within the same attempt; a layer that always
// stalls fails the attempt, and the task is retried and then failed.
func TestServeStall(t *testing.T) {
	const bound = 5 * time.Second
	h := newHarness(t, "st", nil)
	base := baseLayer(t, 70, 300_000)
	img := image(t, base, appLayer(t, "stall"))
	bd, err := base.Digest()
	must(t, err)
	worker := func(t *testing.T, name, host string, stall time.Duration) {
		tw := h.twins(host)
		tw.Remote.StallTimeout = stall
		ctx, cancel := context.WithCancel(context.Background())
		w := &mirror.Worker{Name: name, Queue: h.q, Twins: tw, Metrics: h.metrics, Logf: h.logf}
		done := make(chan struct{})
		go func() { w.Run(ctx); close(done) }()
		t.Cleanup(func() { cancel(); <-done })
	}

	t.Run("once", func(t *testing.T) {
		host, stalls := stallProxy(t, h.reg.host, bd.String(), false)
		worker(t, "once", host, bound)
		d := h.reg.push(t, "stall/once:1", img)
		r := h.waitRecord(t, "stall/once", "1", d, time.Minute, func(r *mirror.Record) bool { return r.State == mirror.StateDone })
		t.Logf("task done in %.2fs, attempt %d, with a stall bound of %s", r.Seconds, r.Attempts, bound)
		if n := stalls.Load(); n < 1 {
			t.Fatalf("the base layer did not stall: the test tests nothing")
		}
		if r.Attempts != 1 || r.Seconds > (2*bound).Seconds() {
			t.Errorf("task done on attempt %d in %.2fs; want attempt 1, within twice the stall bound", r.Attempts, r.Seconds)
		}
		_, twin := h.reg.waitTwin(t, "stall/once:1", d, 10*time.Second)
		if want := directDigest(t, h.reg, "stall/once:1"); twin.String() != want {
			t.Errorf("twin %s, convert makes %s", twin, want)
		}
	})

	t.Run("always", func(t *testing.T) {
		host, stalls := stallProxy(t, h.reg.host, bd.String(), true)
		img := image(t, base, appLayer(t, "stall-always"))
		worker(t, "always", host, 300*time.Millisecond)
		d := h.reg.push(t, "stall/always:1", img)
		r := h.waitRecord(t, "stall/always", "1", d, 2*time.Minute, func(r *mirror.Record) bool { return r.State == mirror.StateFailed })
		t.Logf("task failed after %d attempts and %d stalls: %s", r.Attempts, stalls.Load(), r.Error)
		if !strings.Contains(r.Error, "stalled") || !strings.Contains(r.Error, bd.String()) {
			t.Errorf("the task's error does not say the layer's download stalled: %s", r.Error)
		}
		if r.Attempts != h.cfg.Queue.MaxDeliver {
			t.Errorf("failed after %d attempts, want %d (a stall is worth a retry)", r.Attempts, h.cfg.Queue.MaxDeliver)
		}
	})
}
