package mirror_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/mirror"
)

// harness is serve in process: its HTTP side on httptest, the embedded
// NATS server, and a registry whose notifications go to it.
type harness struct {
	reg     *registry
	cfg     *mirror.Config
	q       *mirror.Queue
	metrics *mirror.Metrics
	url     string
	logf    func(string, ...any)
}

// testLog logs through t until the test ends, then drops lines (workers
// and notifications may outlive it by a moment).
func testLog(t testing.TB) func(string, ...any) {
	var done atomic.Bool
	t.Cleanup(func() { done.Store(true) })
	var mu sync.Mutex
	return func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !done.Load() {
			t.Logf(f, a...)
		}
	}
}

func newHarness(t testing.TB, secret string, edit func(*mirror.Config)) *harness {
	t.Helper()
	h := &harness{logf: testLog(t)}
	var handler atomic.Pointer[http.Handler]
	nf := http.NotFoundHandler()
	handler.Store(&nf)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*handler.Load()).ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	h.url = srv.URL
	h.reg = startRegistry(t, notifyConfig(srv.URL+"/notify", "Bearer "+secret))
	h.cfg = &mirror.Config{Registry: h.reg.host, PlainHTTP: true, Secret: secret}
	h.cfg.NATS.StoreDir = t.TempDir()
	h.cfg.NATS.Listen = "127.0.0.1:0"
	h.cfg.Queue.AckWait = mirror.Duration(3 * time.Second)
	h.cfg.Queue.MaxDeliver = 3
	h.cfg.Queue.Backoff = mirror.Duration(200 * time.Millisecond)
	if edit != nil {
		edit(h.cfg)
	}
	h.cfg.SetDefaults()
	must(t, h.cfg.Validate())
	q, err := mirror.OpenQueue(withTimeout(t, 30*time.Second), h.cfg, h.logf)
	must(t, err)
	t.Cleanup(q.Close)
	h.q = q
	must(t, q.WatchLostTasks(h.logf))
	h.metrics = mirror.NewMetrics(q.Depth)
	ms := mirror.NewServer(h.cfg, q, h.metrics, h.logf)
	t.Cleanup(ms.Close) // before the queue's: a prune under way ends first
	mh := ms.Handler()
	handler.Store(&mh)
	return h
}

func (h *harness) twins(registry string) *mirror.Twins {
	return &mirror.Twins{Registry: registry, PlainHTTP: true, Suffix: h.cfg.Suffix,
		Remote: h.cfg.Remote(), Options: convert.ImageOptions{Jobs: 2}, Cache: h.q.LayerCache(),
		ClaimRefresh: time.Duration(h.cfg.Queue.AckWait) / 3}
}

// startWorker runs a worker in this process until the test ends or stop
// is called; it reaches the registry at host (default: directly).
func (h *harness) startWorker(t testing.TB, name string, host ...string) (stop func()) {
	reg := h.reg.host
	if len(host) > 0 {
		reg = host[0]
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &mirror.Worker{Name: name, Queue: h.q, Twins: h.twins(reg), Metrics: h.metrics, Logf: h.logf}
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func (h *harness) post(t testing.TB, auth, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("POST", h.url+"/notify", strings.NewReader(body))
	must(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (h *harness) get(t testing.TB, path string) string {
	t.Helper()
	rq, err := http.NewRequest(http.MethodGet, h.url+path, nil)
	must(t, err)
	if h.cfg.Secret != "" {
		rq.Header.Set("Authorization", "Bearer "+h.cfg.Secret)
	}
	resp, err := http.DefaultClient.Do(rq)
	must(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s: %s", path, resp.Status, b)
	}
	return string(b)
}

// metric reads one sample of /metrics ("name{labels}").
func (h *harness) metric(t testing.TB, series string) float64 {
	t.Helper()
	sc := bufio.NewScanner(strings.NewReader(h.get(t, "/metrics")))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			must(t, err)
			return f
		}
	}
	return 0
}

// waitRecord polls the task of repo:tag until cond holds.
func (h *harness) waitRecord(t testing.TB, repo, tag string, d v1.Hash, timeout time.Duration, cond func(*mirror.Record) bool) *mirror.Record {
	t.Helper()
	id := mirror.TaskID(repo, tag, d.String())
	deadline := time.Now().Add(timeout)
	var last *mirror.Record
	for time.Now().Before(deadline) {
		r, _, err := h.q.Record(context.Background(), id)
		must(t, err)
		if r != nil && cond(r) {
			return r
		}
		last = r
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("task %s (%s:%s): condition not met in %s; last record %+v", id, repo, tag, timeout, last)
	return nil
}

// directDigest converts repo:tag as `ocierofs convert` does, without the
// mirror, and returns the digest its twin would have.
func directDigest(t testing.TB, reg *registry, repoTag string) string {
	t.Helper()
	d, err := remote.Get(reg.ref(t, repoTag))
	must(t, err)
	img, err := d.Image()
	must(t, err)
	conv, err := convert.NewConverter(convert.ImageOptions{Jobs: 2})
	must(t, err)
	defer conv.Close()
	_, rep, err := conv.Image(context.Background(), img, d.Descriptor)
	must(t, err)
	return rep.Digest
}

func TestServe(t *testing.T) {
	h := newHarness(t, "s3cret", func(c *mirror.Config) { c.Rules.Exclude = []string{"private/**"} })
	mc := newMountCounter(t, h.reg.host)
	h.startWorker(t, "w1", mc.host)
	h.startWorker(t, "w2", mc.host)

	// Notifications without the secret are refused.
	for _, auth := range []string{"", "Bearer wrong", "s3cre"} {
		if code, body := h.post(t, auth, `{"events":[]}`); code != http.StatusUnauthorized {
			t.Errorf("notify with Authorization %q: %d %s, want 401", auth, code, body)
		}
	}
	// So is /status, which names repositories, tags and errors.
	if resp, err := http.Get(h.url + "/status"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/status without the secret: %v %v, want 401", resp.Status, err)
	}
	if code, body := h.post(t, "s3cret", `{"nothing":1}`); code != http.StatusBadRequest {
		t.Errorf("notify with an unknown payload: %d %s, want 400", code, body)
	}

	// One image: its twin appears, mounts, and is what convert makes.
	first := image(t, baseLayer(t, 1, 200_000), appLayer(t, "first"))
	pushed := time.Now()
	d := h.reg.push(t, "apps/first:v1", first)
	twin, twinDigest := h.reg.waitTwin(t, "apps/first:v1", d, time.Minute)
	t.Logf("push → twin of one image (2 layers): %.2fs", time.Since(pushed).Seconds())
	checkTwin(t, first, twin)
	if want := directDigest(t, h.reg, "apps/first:v1"); twinDigest.String() != want {
		t.Errorf("twin %s, but convert makes %s", twinDigest, want)
	}

	// Ten images on one base, pushed at once: the base is converted once.
	convertedBefore := h.metric(t, `ocierofs_mirror_layers_total{result="converted"}`)
	mc.mu.Lock()
	mc.uploaded = nil // from here on, the fleet's twins only
	mc.mu.Unlock()
	base := baseLayer(t, 2, 2_000_000)
	imgs := make([]v1.Image, 10)
	digests := make([]v1.Hash, 10)
	var wg sync.WaitGroup
	pushed = time.Now()
	for i := range imgs {
		imgs[i] = image(t, base, appLayer(t, fmt.Sprintf("app%d", i)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			digests[i] = h.reg.push(t, fmt.Sprintf("fleet/app%d:1.0", i), imgs[i])
		}()
	}
	wg.Wait()
	workers := map[string]int{}
	var twins []v1.Image
	for i := range imgs {
		tw, _ := h.reg.waitTwin(t, fmt.Sprintf("fleet/app%d:1.0", i), digests[i], 2*time.Minute)
		twins = append(twins, tw)
		r := h.waitRecord(t, fmt.Sprintf("fleet/app%d", i), "1.0", digests[i], 10*time.Second, func(r *mirror.Record) bool { return r.State == mirror.StateDone })
		workers[r.Worker]++
	}
	elapsed := time.Since(pushed)
	converted := h.metric(t, `ocierofs_mirror_layers_total{result="converted"}`) - convertedBefore
	reused := h.metric(t, `ocierofs_mirror_layers_total{result="reused"}`)
	t.Logf("ten images sharing a base: all twins %.2fs after the pushes (%.1f images/s); layers converted %v, reused %v; tasks per worker %v",
		elapsed.Seconds(), 10/elapsed.Seconds(), converted, reused, workers)
	if converted != 11 {
		t.Errorf("ten images of two layers on one base: %v layers converted, want 11 (the base once)", converted)
	}
	if reused < 9 {
		t.Errorf("%v layers reused from the cache, want at least 9", reused)
	}
	skel := h.metric(t, `ocierofs_mirror_lower_reads_total{via="skeleton"}`)
	whole := h.metric(t, `ocierofs_mirror_lower_reads_total{via="layer"}`)
	t.Logf("the shared base read for its directories: %v times from its skeleton, %v times whole", skel, whole)
	if skel+whole != 9 || whole > 2 {
		t.Errorf("base read %v times via its skeleton and %v times whole: want 9 in all, at most 2 whole (until the skeleton is kept)", skel, whole)
	}
	if n := mc.mounts.Load(); n < 9 {
		t.Errorf("%d blobs mounted across repositories, want the converted base in 9 of the 10 (not uploaded again)", n)
	}
	if len(workers) != 2 {
		t.Errorf("tasks per worker %v: want both workers to take some", workers)
	}
	// Every blob uploaded is a layer or config of a twin: a layer taken
	// from the cache is not converted again (from its skeleton, that made
	// a blob of no use).
	used := map[string]bool{}
	for _, tw := range twins {
		m, err := tw.Manifest()
		must(t, err)
		used[m.Config.Digest.String()] = true
		for _, l := range m.Layers {
			used[l.Digest.String()] = true
		}
	}
	mc.mu.Lock()
	for _, d := range mc.uploaded {
		if !used[d] && strings.HasPrefix(d, "sha256:") {
			t.Errorf("uploaded blob %s is in no twin", d)
		}
	}
	mc.mu.Unlock()
	// A twin assembled from the cache is still exactly convert's.
	checkTwin(t, imgs[7], twins[7])
	tw7, err := twins[7].Digest()
	must(t, err)
	if want := directDigest(t, h.reg, "fleet/app7:1.0"); tw7.String() != want {
		t.Errorf("twin of fleet/app7 from the layer cache %s, but convert makes %s", tw7, want)
	}

	// A broken source layer fails visibly; the image pushed with it converts.
	lie := tarLayer(t, file("x", 0o644, []byte("x")))
	lie.diffID = sha256Of([]byte("not this layer"))
	broken := image(t, baseLayer(t, 3, 1000), lie)
	good := image(t, baseLayer(t, 4, 1000), appLayer(t, "good"))
	bd := h.reg.push(t, "apps/broken:v1", broken)
	gd := h.reg.push(t, "apps/good:v1", good)
	h.reg.waitTwin(t, "apps/good:v1", gd, time.Minute)
	r := h.waitRecord(t, "apps/broken", "v1", bd, time.Minute, func(r *mirror.Record) bool { return r.State == mirror.StateFailed })
	if !strings.Contains(r.Error, "diff_id") {
		t.Errorf("failed task's error %q does not say what is wrong", r.Error)
	}
	var st mirror.Status
	must(t, json.Unmarshal([]byte(h.get(t, "/status?state=failed")), &st))
	if len(st.Tasks) != 1 || st.Tasks[0].ID != r.ID || st.Tasks[0].Error == "" {
		t.Errorf("/status?state=failed: %+v, want the broken task with its error", st.Tasks)
	}

	// Duplicates collapse: the same event again, and as a Harbor webhook.
	ev := fmt.Sprintf(`{"events":[{"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"repository":"apps/first","tag":"v1"},"request":{"useragent":"docker/27"}}]}`, d)
	if code, body := h.post(t, "Bearer s3cret", ev); code != 200 || !strings.Contains(body, `"result":"duplicate"`) {
		t.Errorf("the same push again: %d %s, want a duplicate", code, body)
	}
	harbor := fmt.Sprintf(`{"type":"PUSH_ARTIFACT","occur_at":1700000000,"operator":"admin","event_data":{"resources":[{"digest":%q,"tag":"1.0","resource_url":"%s/fleet/app3:1.0"}],"repository":{"name":"app3","namespace":"fleet","repo_full_name":"fleet/app3","repo_type":"private"}}}`, digests[3], h.reg.host)
	code, body := h.post(t, "s3cret", harbor)
	if code != 200 || !strings.Contains(body, `"kind":"harbor"`) || !strings.Contains(body, mirror.TaskID("fleet/app3", "1.0", digests[3].String())) {
		t.Errorf("Harbor webhook of a converted image: %d %s, want the same task, a duplicate", code, body)
	}

	// Filters and the loop guard.
	h.reg.push(t, "private/secret:1", image(t, baseLayer(t, 5, 100)))
	deadline := time.Now().Add(10 * time.Second)
	for h.metric(t, `ocierofs_mirror_events_total{result="filtered"}`) < 1 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := h.metric(t, `ocierofs_mirror_events_total{result="filtered"}`); n < 1 {
		t.Errorf("push to an excluded repository: %v events filtered", n)
	}
	if n := h.metric(t, `ocierofs_mirror_events_total{result="loop"}`); n < 12 {
		t.Errorf("%v pushes of twins seen as such (loop guard), want one per twin at least", n)
	}
	tags, err := remote.List(h.reg.ref(t, "apps/first:v1").Context())
	must(t, err)
	for _, tag := range tags {
		if strings.Count(tag, "-erofs") > 1 {
			t.Errorf("a twin of a twin: apps/first:%s", tag)
		}
	}
	if n := h.metric(t, "ocierofs_mirror_queue_depth"); n != 0 {
		t.Errorf("queue depth %v at the end, want 0", n)
	}
	for _, s := range []string{"ocierofs_mirror_bytes_in_total", "ocierofs_mirror_bytes_out_total"} {
		if h.metric(t, s) <= 0 {
			t.Errorf("%s is not counted", s)
		}
	}
	// sync with a queue: what no notification brought (the excluded
	// repository, for a syncer without that rule) goes to the workers; a
	// failed task is queued again (a retry), a converted one is up to date.
	scfg := *h.cfg
	scfg.Rules = mirror.Rules{}
	s := &mirror.Syncer{Config: &scfg, Queue: h.q}
	ctx := withTimeout(t, time.Minute)
	items, err := s.Sources(ctx)
	must(t, err)
	results := map[string]string{}
	for _, it := range s.Run(ctx, s.Plan(ctx, items)) {
		results[it.Repository+":"+it.Tag] = it.Action + "/" + it.Result
	}
	if results["private/secret:1"] != "convert/queued" || results["apps/first:v1"] != "up-to-date/" || results["apps/broken:v1"] != "convert/queued" {
		t.Errorf("sync into the queue: %v", results)
	}
	h.reg.waitTwin(t, "private/secret:1", must2(remote.Head(h.reg.ref(t, "private/secret:1"))).Digest, time.Minute)

	// An image ocierofs made, pushed under a plain tag: its task is
	// skipped for good (the same push notified again is a duplicate, not
	// queued again), and sync plans no conversion of it.
	copied := must2(remote.Image(h.reg.ref(t, "apps/first:v1-erofs")))
	must(t, remote.Write(h.reg.ref(t, "apps/copy:v1"), copied))
	copiedDigest := must2(copied.Digest())
	h.waitRecord(t, "apps/copy", "v1", copiedDigest, time.Minute, func(r *mirror.Record) bool {
		return r.State == mirror.StateSkipped && r.Final
	})
	again := fmt.Sprintf(`{"events":[{"action":"push","target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":%q,"repository":"apps/copy","tag":"v1"},"request":{"useragent":"docker/27"}}]}`, copiedDigest)
	if code, body := h.post(t, "Bearer s3cret", again); code != 200 || !strings.Contains(body, `"result":"duplicate"`) {
		t.Errorf("the push of a converted image again: %d %s, want a duplicate of the skipped task", code, body)
	}
	items, err = s.Sources(ctx)
	must(t, err)
	for _, it := range s.Run(ctx, s.Plan(ctx, items)) {
		if it.Repository == "apps/copy" && (it.Action != "skip" || it.Result != "" || !strings.Contains(it.Detail, "converted")) {
			t.Errorf("sync of a converted image under a plain tag: %s/%s (%s), want a skip", it.Action, it.Result, it.Detail)
		}
	}

	// A twin deleted after its task was done: sync queues it again (the
	// queue took it for a duplicate of the finished task).
	twinRef := h.reg.ref(t, "apps/first:v1-erofs")
	deleted := must2(remote.Head(twinRef)).Digest
	must(t, remote.Delete(twinRef.Context().Digest(deleted.String())))
	items, err = s.Sources(ctx)
	must(t, err)
	for _, it := range s.Run(ctx, s.Plan(ctx, items)) {
		if it.Repository+":"+it.Tag == "apps/first:v1" && it.Action+"/"+it.Result != "convert/queued" {
			t.Errorf("sync after deleting apps/first:v1-erofs: %s/%s (%s)", it.Action, it.Result, it.Detail)
		}
	}
	h.reg.waitTwin(t, "apps/first:v1", must2(remote.Head(h.reg.ref(t, "apps/first:v1"))).Digest, time.Minute)

	// A repository listed without a tag (pushed by digest only) is skipped.
	img := image(t, baseLayer(t, 3, 100))
	must(t, remote.Write(h.reg.ref(t, "apps/untagged@"+must2(img.Digest()).String()), img))
	if _, err := s.Sources(ctx); err != nil {
		t.Errorf("sync with an untagged repository: %v", err)
	}
	if code := getStatus(t, h.url+"/readyz"); code != 200 {
		t.Errorf("/readyz: %d", code)
	}

	// A source deleted from the registry: its delete notification prunes
	// its twin at once (no sync --prune needed), and nothing else.
	gone := image(t, baseLayer(t, 6, 100), appLayer(t, "gone"))
	goneDigest := h.reg.push(t, "apps/gone:v1", gone)
	h.reg.waitTwin(t, "apps/gone:v1", goneDigest, time.Minute)
	deletedAt := time.Now()
	must(t, remote.Delete(h.reg.ref(t, "apps/gone@"+goneDigest.String())))
	for {
		_, err := remote.Head(h.reg.ref(t, "apps/gone:v1-erofs"))
		var terr *transport.Error
		if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound {
			break
		}
		if time.Since(deletedAt) > 30*time.Second {
			t.Fatalf("apps/gone:v1-erofs is still there 30s after its source was deleted (HEAD: %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("source deleted → its twin deleted: %.2fs", time.Since(deletedAt).Seconds())
	// The counter moves once the pass has deleted what it found.
	for deadline := time.Now().Add(10 * time.Second); h.metric(t, `ocierofs_mirror_pruned_total{result="deleted"}`) == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if n := h.metric(t, `ocierofs_mirror_pruned_total{result="deleted"}`); n != 1 {
		t.Errorf("%v twins pruned, want 1", n)
	}
	if n := h.metric(t, `ocierofs_mirror_events_total{result="prune"}`); n < 1 {
		t.Errorf("%v delete events pruned their repository", n)
	}
	for _, live := range []string{"apps/good:v1-erofs", "apps/first:v1-erofs", "fleet/app3:1.0-erofs"} {
		if _, err := remote.Head(h.reg.ref(t, live)); err != nil {
			t.Errorf("%s, whose source is there: %v", live, err)
		}
	}
	// Deletes that prune nothing: the twin's own delete, which comes back
	// from the registry with ocierofs's user agent, or names a twin tag;
	// an excluded repository; a name that is no repository.
	for _, c := range []struct{ repo, tag, ua, want string }{
		{"apps/gone", "", "ocierofs-mirror", "loop"},
		{"apps/gone", "v1-erofs", "docker/27", "loop"},
		{"private/secret", "", "docker/27", "filtered"},
		{"apps/../x", "", "docker/27", "invalid"},
	} {
		ev := fmt.Sprintf(`{"events":[{"action":"delete","target":{"digest":%q,"repository":%q,"tag":%q},"request":{"useragent":%q}}]}`, goneDigest, c.repo, c.tag, c.ua)
		if code, body := h.post(t, "s3cret", ev); code != 200 || !strings.Contains(body, `"result":"`+c.want+`"`) {
			t.Errorf("delete of %s:%s by %s: %d %s, want %s", c.repo, c.tag, c.ua, code, body, c.want)
		}
	}
}

func getStatus(t testing.TB, url string) int {
	resp, err := http.Get(url)
	must(t, err)
	resp.Body.Close()
	return resp.StatusCode
}
