package mirror_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/mirror"
	"github.com/ocierofs/ocierofs/internal/testregistry"
)

// refusing is a proxy that answers the first n pushes of a twin's
// manifest with 400 (which go-containerregistry does not retry).
func refusing(t testing.TB, upstream string, n int32) string {
	rp := testregistry.Proxy(t, upstream)
	var left atomic.Int32
	left.Store(n)
	return testregistry.Serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/") && strings.HasSuffix(r.URL.Path, "-erofs") && left.Add(-1) >= 0 {
			http.Error(w, `{"errors":[{"code":"MANIFEST_INVALID","message":"refused by the test"}]}`, http.StatusBadRequest)
			return
		}
		rp.ServeHTTP(w, r)
	}))
}

// A failed attempt is retried after the backoff and the retry succeeds;
// an index is converted as a whole (its manifests, pushed untagged, are
// not tasks of their own).
func TestRetryAndIndex(t *testing.T) {
	h := newHarness(t, "r", nil)
	h.startWorker(t, "R", refusing(t, h.reg.host, 1))
	img := image(t, baseLayer(t, 30, 1000), appLayer(t, "retry"))
	d := h.reg.push(t, "retry/me:1", img)
	h.reg.waitTwin(t, "retry/me:1", d, time.Minute)
	r := h.waitRecord(t, "retry/me", "1", d, 10*time.Second, func(r *mirror.Record) bool { return r.State == mirror.StateDone })
	if r.Attempts != 2 {
		t.Errorf("task done on attempt %d, want 2 (the first push was refused)", r.Attempts)
	}
	if n := h.metric(t, `ocierofs_mirror_conversions_total{result="retry"}`); n != 1 {
		t.Errorf("%v attempts counted as retried, want 1", n)
	}

	// A rollback: the tag moves to another image and back; its twin follows.
	img2 := image(t, baseLayer(t, 30, 1000), appLayer(t, "retry-2"))
	d2 := h.reg.push(t, "retry/me:1", img2)
	h.reg.waitTwin(t, "retry/me:1", d2, time.Minute)
	if d1 := h.reg.push(t, "retry/me:1", img); d1 != d {
		t.Fatalf("the same image pushed again has digest %s, not %s", d1, d)
	}
	h.reg.waitTwin(t, "retry/me:1", d, time.Minute)

	// An index of two platforms on one base.
	base := baseLayer(t, 31, 5000)
	amd := image(t, base, appLayer(t, "amd64"))
	arm := image(t, base, appLayer(t, "arm64"))
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	idx = mutate.AppendManifests(idx,
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}})
	must(t, remote.WriteIndex(h.reg.ref(t, "multi/app:2"), idx))
	id, err := idx.Digest()
	must(t, err)
	deadline := time.Now().Add(time.Minute)
	var twin v1.ImageIndex
	for time.Now().Before(deadline) && twin == nil {
		if desc, err := remote.Get(h.reg.ref(t, "multi/app:2-erofs")); err == nil {
			twin, err = desc.ImageIndex()
			must(t, err)
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if twin == nil {
		t.Fatal("no twin of the index")
	}
	desc, err := remote.Get(h.reg.ref(t, "multi/app:2"))
	must(t, err)
	conv, err := convert.NewConverter(convert.ImageOptions{Jobs: 2})
	must(t, err)
	defer conv.Close()
	_, rep, err := conv.Index(context.Background(), must2(desc.ImageIndex()), desc.Descriptor)
	must(t, err)
	if td, _ := twin.Digest(); td.String() != rep.Digest {
		t.Errorf("twin index %s, convert makes %s", td, rep.Digest)
	}
	im, err := twin.IndexManifest()
	must(t, err)
	if len(im.Manifests) != 2 || im.Annotations[convert.AnnotationSourceManifest] != id.String() {
		t.Fatalf("twin index %+v", im)
	}
	armTwin, err := twin.Image(im.Manifests[1].Digest)
	must(t, err)
	checkTwin(t, arm, armTwin)
	if n := h.metric(t, `ocierofs_mirror_events_total{result="untagged"}`); n < 2 {
		t.Errorf("%v untagged manifest pushes (the index's), want 2", n)
	}
	if n := h.metric(t, `ocierofs_mirror_layers_total{result="reused"}`); n < 1 {
		t.Errorf("the index's platforms share a base: %v layers reused, want 1", n)
	}
	// Three layers converted: the base once, for both platforms (review
	// 20-b: an index counted its shared layers once per platform).
	rec := h.waitRecord(t, "multi/app", "2", id, 10*time.Second, func(r *mirror.Record) bool { return r.State == mirror.StateDone })
	if rec.LayersConverted+rec.LayersReused != 3 {
		t.Errorf("the index's task: %d layers converted and %d reused, want 3 in all", rec.LayersConverted, rec.LayersReused)
	}
}

func must2[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// A worker lost on the last attempt: the server's max-deliveries
// advisory marks the task failed instead of leaving it running forever.
func TestLostOnLastAttempt(t *testing.T) {
	h := newHarness(t, "l", func(c *mirror.Config) { c.Queue.MaxDeliver = 1 })
	// The embedded server wants its token: any local user could write
	// the layer cache without (review 20-a).
	if nc, err := nats.Connect(h.q.ClientURL()); err == nil || !strings.Contains(err.Error(), "Authorization Violation") {
		if nc != nil {
			nc.Close()
		}
		t.Errorf("a client without the token: %v, want an authorization violation", err)
	}
	tok, err := os.ReadFile(filepath.Join(h.cfg.NATS.StoreDir, ".ocierofs-nats-token"))
	must(t, err)
	if fi, err := os.Stat(filepath.Join(h.cfg.NATS.StoreDir, ".ocierofs-nats-token")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the token file: %v %v, want 0600", fi.Mode(), err)
	}
	nc, err := nats.Connect(h.q.ClientURL(), nats.Token(strings.TrimSpace(string(tok))))
	must(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	must(t, err)
	ctx := withTimeout(t, time.Minute)
	cons, err := js.Consumer(ctx, "OCIEROFS_TASKS", "ocierofs-workers")
	must(t, err)
	d := h.reg.push(t, "lost/me:1", image(t, baseLayer(t, 40, 100)))
	// This test is the worker: it takes the task and never answers.
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(20*time.Second))
	must(t, err)
	got := 0
	for range batch.Messages() {
		got++
	}
	if got != 1 {
		t.Fatalf("fetched %d tasks, want 1 (%v)", got, batch.Error())
	}
	r := h.waitRecord(t, "lost/me", "1", d, 20*time.Second, func(r *mirror.Record) bool { return r.State == mirror.StateFailed })
	if !strings.Contains(r.Error, "lost") {
		t.Errorf("failed task's error %q does not say the worker was lost", r.Error)
	}
	if w, p, err := h.q.Depth(ctx); err != nil || w != 0 || p != 0 {
		t.Errorf("queue after the advisory: %d waiting, %d in progress, %v; want it empty", w, p, err)
	}
}

// A conversion longer than the ack wait stays with its worker: progress
// reports keep the task from going to the idle one.
func TestLongConversion(t *testing.T) {
	h := newHarness(t, "s", nil) // ack wait 3s
	slow := newThrottle(t, h.reg.host, 256<<10)
	h.startWorker(t, "slow", slow.host)
	img := image(t, baseLayer(t, 60, 1_500_000), appLayer(t, "long"))
	d := h.reg.push(t, "long/one:1", img)
	h.waitRecord(t, "long/one", "1", d, 30*time.Second, func(r *mirror.Record) bool { return r.State == mirror.StateRunning })
	h.startWorker(t, "idle")
	h.reg.waitTwin(t, "long/one:1", d, 2*time.Minute)
	r := h.waitRecord(t, "long/one", "1", d, 10*time.Second, func(r *mirror.Record) bool { return r.State == mirror.StateDone })
	t.Logf("conversion took %.1fs with an ack wait of 3s", r.Seconds)
	if r.Worker != "slow" || r.Attempts != 1 || r.Seconds < 4 {
		t.Errorf("task done by %s on attempt %d in %.1fs; want the slow worker, attempt 1, longer than the ack wait", r.Worker, r.Attempts, r.Seconds)
	}
}

// mountCounter is a proxy that counts the cross-repository blob mounts
// the registry accepted.
type mountCounter struct {
	host   string
	mounts atomic.Int32
	// uploaded are the digests of the blobs uploads completed.
	mu       sync.Mutex
	uploaded []string
}

func newMountCounter(t testing.TB, upstream string) *mountCounter {
	mc := &mountCounter{}
	rp := testregistry.Proxy(t, upstream)
	rp.ModifyResponse = func(resp *http.Response) error {
		q := resp.Request.URL.Query()
		if resp.Request.Method == http.MethodPost && q.Get("mount") != "" && q.Get("from") != "" && resp.StatusCode == http.StatusCreated {
			mc.mounts.Add(1)
		}
		if d := q.Get("digest"); resp.Request.Method == http.MethodPut && d != "" && resp.StatusCode == http.StatusCreated {
			mc.mu.Lock()
			mc.uploaded = append(mc.uploaded, d)
			mc.mu.Unlock()
		}
		return nil
	}
	mc.host = testregistry.Serve(t, rp)
	return mc
}

// The embedded server keeps the queue on disk: tasks queued before a
// restart are converted after it.
func TestRestart(t *testing.T) {
	h := newHarness(t, "x", nil) // no worker yet
	img := image(t, baseLayer(t, 70, 1000), appLayer(t, "restart"))
	d := h.reg.push(t, "restart/me:1", img)
	h.waitRecord(t, "restart/me", "1", d, 30*time.Second, func(r *mirror.Record) bool { return r.State == mirror.StateQueued })
	// A second server on the same store is refused while the first runs.
	if q2, err := mirror.OpenQueue(withTimeout(t, 30*time.Second), h.cfg, h.logf); err == nil || !strings.Contains(err.Error(), "in use") {
		if q2 != nil {
			q2.Close()
		}
		t.Errorf("a second queue on the store: err = %v, want it refused", err)
	}
	h.q.Close()
	q, err := mirror.OpenQueue(withTimeout(t, 30*time.Second), h.cfg, h.logf)
	must(t, err)
	t.Cleanup(q.Close)
	// The restarted server recovers its stream from the store in the
	// background: under load that took a moment.
	w, _, err := q.Depth(context.Background())
	for deadline := time.Now().Add(10 * time.Second); (err != nil || w != 1) && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		w, _, err = q.Depth(context.Background())
	}
	if err != nil || w != 1 {
		t.Fatalf("after the restart: %d tasks waiting (%v), want 1", w, err)
	}
	h.q = q
	h.startWorker(t, "after")
	h.reg.waitTwin(t, "restart/me:1", d, time.Minute)
}
