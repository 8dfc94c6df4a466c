package mirror_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/mirror"
	"github.com/ocierofs/ocierofs/internal/testregistry"
)

var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

// mirrorBinary builds the mirror's command (serve, sync) once for the
// tests of this package.
func mirrorBinary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "ocierofs-mirror-bin-")
		if built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "ocierofs-mirror")
		built.out, built.err = exec.Command("go", "build", "-o", built.bin, "github.com/ocierofs/ocierofs/cmd/ocierofs-mirror").CombinedOutput()
	})
	if built.err != nil {
		t.Fatalf("go build: %v\n%s", built.err, built.out)
	}
	return built.bin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// A worker process killed with SIGKILL in the middle of a conversion: the
// task goes to another worker after the ack wait, which takes over the
// dead worker's claims on layers and pushes the twin.
func TestWorkerKilled(t *testing.T) {
	bin := mirrorBinary(t)
	h := newHarness(t, "k", nil)
	slow := newThrottle(t, h.reg.host, 256<<10)
	var logs testregistry.Buffer
	a := exec.Command(bin, "serve", "--worker", "--nats", h.q.WorkerURL(), "--registry", slow.host, "--plain-http",
		"--ack-wait", "3s", "--max-deliver", "3", "--backoff", "200ms", "--listen", "127.0.0.1:0", "--name", "A", "-j", "1")
	a.Stdout, a.Stderr = &logs, &logs
	a.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, a.Start())
	exited := make(chan struct{})
	go func() { a.Wait(); close(exited) }()
	t.Cleanup(func() { a.Process.Kill(); <-exited })

	img := image(t, baseLayer(t, 10, 3_000_000), appLayer(t, "victim"))
	d := h.reg.push(t, "kill/me:1", img)
	h.waitRecord(t, "kill/me", "1", d, 30*time.Second, func(r *mirror.Record) bool { return r.State == mirror.StateRunning && r.Worker == "A" })
	deadline := time.Now().Add(20 * time.Second)
	for slow.bytes() < 300<<10 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if slow.bytes() < 300<<10 {
		t.Fatalf("worker A read %d bytes of the source in 20s; its log:\n%s", slow.bytes(), logs.String())
	}
	must(t, a.Process.Signal(syscall.SIGKILL))
	<-exited
	killed := time.Now()
	t.Logf("worker A killed after reading %d of ~3 MB", slow.bytes())
	if r, _, err := h.q.Record(context.Background(), mirror.TaskID("kill/me", "1", d.String())); err != nil || r.State != mirror.StateRunning {
		t.Fatalf("after the kill: record %+v, %v; want still running (nobody said otherwise)", r, err)
	}

	h.startWorker(t, "B")
	twin, _ := h.reg.waitTwin(t, "kill/me:1", d, time.Minute)
	r := h.waitRecord(t, "kill/me", "1", d, 10*time.Second, func(r *mirror.Record) bool { return r.State == mirror.StateDone })
	t.Logf("twin pushed by %s on attempt %d, %.2fs after the kill (ack wait 3s)", r.Worker, r.Attempts, time.Since(killed).Seconds())
	if r.Worker != "B" || r.Attempts != 2 {
		t.Errorf("task finished by %s on attempt %d, want B on attempt 2", r.Worker, r.Attempts)
	}
	checkTwin(t, img, twin)
	// The token it connected with is nowhere in its log.
	tok, _, _ := strings.Cut(strings.TrimPrefix(h.q.WorkerURL(), "nats://"), "@")
	if strings.Contains(logs.String(), tok) || !strings.Contains(logs.String(), "nats://***@") {
		t.Errorf("worker A's log shows the token, or no redacted URL:\n%s", logs.String())
	}
}

func TestSync(t *testing.T) {
	reg := startRegistry(t, "")
	base := baseLayer(t, 20, 50_000)
	reg.push(t, "lib/alpine:3.19", image(t, base, appLayer(t, "a319")))
	reg.push(t, "lib/alpine:3.20", image(t, base, appLayer(t, "a320")))
	reg.push(t, "lib/busy:1", image(t, base, appLayer(t, "busy")))
	reg.push(t, "other/x:1", image(t, base))
	cfg := &mirror.Config{Registry: reg.host, PlainHTTP: true, Rules: mirror.Rules{Include: []string{"lib/**"}, Exclude: []string{"lib/alpine:3.20"}}}
	cfg.SetDefaults()
	must(t, cfg.Validate())
	s := &mirror.Syncer{Config: cfg, Jobs: 2, Logf: testLog(t), Twins: &mirror.Twins{Registry: reg.host, PlainHTTP: true, Suffix: cfg.Suffix,
		Remote: cfg.Remote(), Options: convert.ImageOptions{Jobs: 1}, Cache: mirror.MemoryCache()}}
	ctx := withTimeout(t, 2*time.Minute)
	plan := func() map[string]string {
		items, err := s.Sources(ctx)
		must(t, err)
		got := map[string]string{}
		for _, it := range s.Plan(ctx, items) {
			got[it.Repository+":"+it.Tag] = it.Action
		}
		return got
	}
	want := map[string]string{"lib/alpine:3.19": "convert", "lib/busy:1": "convert"}
	if got := plan(); !sameMap(got, want) {
		t.Fatalf("plan %v, want %v", got, want)
	}
	items, err := s.Sources(ctx)
	must(t, err)
	converted := 0
	for _, it := range s.Run(ctx, s.Plan(ctx, items)) {
		if it.Result != "done" {
			t.Errorf("%s:%s: %s (%s)", it.Repository, it.Tag, it.Result, it.Detail)
		}
		converted++
	}
	if converted != 2 {
		t.Errorf("%d images converted, want 2", converted)
	}
	// Idempotent: nothing left to do, twins are not sources.
	want = map[string]string{"lib/alpine:3.19": "up-to-date", "lib/busy:1": "up-to-date"}
	if got := plan(); !sameMap(got, want) {
		t.Errorf("second plan %v, want %v", got, want)
	}
	// A tag pushed again is out of date.
	reg.push(t, "lib/busy:1", image(t, base, appLayer(t, "busy2")))
	want["lib/busy:1"] = "convert"
	if got := plan(); !sameMap(got, want) {
		t.Errorf("plan after a new push %v, want %v", got, want)
	}

	// Pruning: lib/busy:1's twin names a source manifest that is still
	// there (the tag has moved on, sync makes it again): kept. A source
	// deleted from the registry takes its twin with it; the others stay.
	if orphans, err := s.Orphans(ctx); err != nil || len(orphans) != 0 {
		t.Errorf("orphans before any delete: %+v, %v", orphans, err)
	}
	gone := reg.push(t, "lib/gone:1", image(t, base, appLayer(t, "gone")))
	for _, it := range s.Run(ctx, s.Plan(ctx, []mirror.SyncItem{{Repository: "lib/gone", Tag: "1"}})) {
		if it.Result != "done" {
			t.Fatalf("lib/gone:1: %s (%s)", it.Result, it.Detail)
		}
	}
	must(t, remote.Delete(reg.ref(t, "lib/gone@"+gone.String())))
	orphans, err := s.Orphans(ctx)
	must(t, err)
	if len(orphans) != 1 || orphans[0].Repository != "lib/gone" || orphans[0].Tag != "1-erofs" || !strings.Contains(orphans[0].Detail, "is gone") {
		t.Fatalf("orphans %+v, want lib/gone:1-erofs", orphans)
	}
	// The command, dry: it lists the orphan, deletes nothing.
	dry, err := exec.Command(mirrorBinary(t), "sync", "--registry", reg.host, "--plain-http", "--include", "lib/gone", "--prune", "--dry-run", "-q").Output()
	if err != nil || !strings.Contains(string(dry), "prune       lib/gone:1-erofs: its source "+gone.String()+" is gone") {
		t.Errorf("ocierofs sync --prune --dry-run: %v\n%s", err, dry)
	}
	// The source pushed again between the listing and the delete: the
	// twin is judged again, and kept.
	regone := reg.push(t, "lib/gone:1", image(t, base, appLayer(t, "gone")))
	if regone != gone {
		t.Fatalf("the same image pushed again has digest %s, first %s", regone, gone)
	}
	if res := s.Prune(ctx, slices.Clone(orphans)); res[0].Result != "kept" || !strings.Contains(res[0].Detail, "source is back") {
		t.Errorf("prune of lib/gone:1-erofs after its source came back: %s (%s)", res[0].Result, res[0].Detail)
	}
	must(t, remote.Delete(reg.ref(t, "lib/gone@"+gone.String())))
	for _, it := range s.Prune(ctx, orphans) {
		if it.Result != "deleted" {
			t.Errorf("prune %s:%s: %s (%s)", it.Repository, it.Tag, it.Result, it.Detail)
		}
	}
	if _, err := remote.Head(reg.ref(t, "lib/gone:1-erofs")); err == nil {
		t.Error("lib/gone:1-erofs is still there")
	}
	// An orphan twin tag whose manifest a live twin tag names too (one
	// source, two tags): only the tag may go, which this registry cannot
	// do; the manifest stays.
	reg.push(t, "lib/two:a", image(t, base, appLayer(t, "two")))
	s.Run(ctx, s.Plan(ctx, []mirror.SyncItem{{Repository: "lib/two", Tag: "a"}}))
	twinA, err := remote.Get(reg.ref(t, "lib/two:a-erofs"))
	must(t, err)
	must(t, remote.Tag(reg.ref(t, "lib/two:c-erofs").(name.Tag), twinA))
	orphans, err = s.Orphans(ctx)
	must(t, err)
	if len(orphans) != 1 || orphans[0].Tag != "c-erofs" {
		t.Fatalf("orphans %+v, want lib/two:c-erofs", orphans)
	}
	if res := s.Prune(ctx, orphans); res[0].Result != "failed" || !strings.Contains(res[0].Detail, "another twin tag") {
		t.Errorf("prune of lib/two:c-erofs: %s (%s)", res[0].Result, res[0].Detail)
	}
	if _, err := remote.Head(reg.ref(t, "lib/two:a-erofs")); err != nil {
		t.Errorf("lib/two:a-erofs: %v", err)
	}
	if _, err := remote.Head(reg.ref(t, "lib/alpine:3.19-erofs")); err != nil {
		t.Errorf("lib/alpine:3.19-erofs: %v", err)
	}

	// The command: flags instead of a config, a list file, JSON out.
	bin := mirrorBinary(t)
	list := filepath.Join(t.TempDir(), "list")
	must(t, os.WriteFile(list, []byte("# images\nlib/alpine:3.20\nother/x:1\n"), 0o644))
	var out, errb bytes.Buffer
	cmd := exec.Command(bin, "sync", "--registry", reg.host, "--plain-http", "--list-file", list, "--exclude", "other/**", "-o", "json", "-q")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("ocierofs sync: %v\n%s", err, errb.String())
	}
	var rep struct {
		Items []mirror.SyncItem `json:"items"`
	}
	must(t, json.Unmarshal(out.Bytes(), &rep))
	if len(rep.Items) != 1 || rep.Items[0].Repository != "lib/alpine" || rep.Items[0].Tag != "3.20" || rep.Items[0].Result != "done" {
		t.Errorf("ocierofs sync --list-file: %+v", rep.Items)
	}
	out.Reset()
	cmd = exec.Command(bin, "sync", "--registry", reg.host, "--plain-http", "--dry-run")
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("ocierofs sync --dry-run: %v\n%s", err, errb.String())
	}
	const wantOut = "up-to-date  lib/alpine:3.19\nup-to-date  lib/alpine:3.20\nconvert     lib/busy:1\nup-to-date  lib/two:a\nconvert     other/x:1\n"
	if out.String() != wantOut {
		t.Errorf("ocierofs sync --dry-run printed\n%s\nwant\n%s", out.String(), wantOut)
	}
}

func sameMap(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// The single binary: `ocierofs serve --config FILE` with the embedded
// queue, convert options from the file, a secret from the environment.
func TestServeCommand(t *testing.T) {
	bin := mirrorBinary(t)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	reg := startRegistry(t, notifyConfig("http://"+listen+"/notify", "Bearer sekrit"))
	conf := filepath.Join(t.TempDir(), "mirror.conf")
	must(t, os.WriteFile(conf, fmt.Appendf(nil, `# ocierofs mirror
registry: %q
plainHTTP: true
listen: %q
secret: $OCIEROFS_TEST_SECRET
rules { exclude: ["skip/**"] }
nats { storeDir: %q, listen: "127.0.0.1:0" }
queue { ackWait: "5s" }
convert { "layer-compression": "zstd", jobs: 1 }
`, reg.host, listen, t.TempDir()), 0o644))
	var logs testregistry.Buffer
	cmd := exec.Command(bin, "serve", "--config", conf)
	cmd.Env = append(os.Environ(), "OCIEROFS_TEST_SECRET=sekrit")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if t.Failed() {
			t.Logf("serve's log:\n%s", logs.String())
		}
	})
	waitReady(t, "http://"+listen, &logs)
	img := image(t, baseLayer(t, 50, 20_000), appLayer(t, "cmd"))
	d := reg.push(t, "cmd/app:1", img)
	twin, _ := reg.waitTwin(t, "cmd/app:1", d, time.Minute)
	m, err := twin.Manifest()
	must(t, err)
	for _, l := range m.Layers {
		if l.MediaType != convert.MediaTypeLayerZstd {
			t.Errorf("twin layer %s: media type %s, want %s (convert options of the config file)", l.Digest, l.MediaType, convert.MediaTypeLayerZstd)
		}
	}
	// The twin is pushed before the task is recorded done: /status
	// may say running for a moment.
	var st mirror.Status
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		rq, err := http.NewRequest(http.MethodGet, "http://"+listen+"/status", nil)
		must(t, err)
		rq.Header.Set("Authorization", "sekrit")
		resp, err := http.DefaultClient.Do(rq)
		must(t, err)
		st = mirror.Status{}
		must(t, json.NewDecoder(resp.Body).Decode(&st))
		resp.Body.Close()
		if len(st.Tasks) == 1 && st.Tasks[0].State == mirror.StateDone || time.Since(start) > 30*time.Second {
			break
		}
	}
	if len(st.Tasks) != 1 || st.Tasks[0].State != mirror.StateDone || st.Tasks[0].Repository != "cmd/app" {
		t.Errorf("/status: %+v", st)
	}
	// SIGTERM: a clean stop.
	must(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("serve after SIGTERM: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Errorf("serve still running 15s after SIGTERM")
	}
}

// serve over HTTPS: the secret never crosses the network in clear.
func TestServeTLS(t *testing.T) {
	bin := mirrorBinary(t)
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var logs testregistry.Buffer
	cmd := exec.Command(bin, "serve", "--registry", "127.0.0.1:1", "--nats-store", filepath.Join(dir, "nats"), "--nats-listen", "127.0.0.1:0",
		"--listen", listen, "--tls-cert", cert, "--tls-key", key, "--secret", "tls-secret", "--tasks", "0")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the test's own certificate
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("https://" + listen + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve (TLS) not ready in 30s:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	post := func(auth string) int {
		req, _ := http.NewRequest("POST", "https://"+listen+"/notify", strings.NewReader(`{"events":[]}`))
		req.Header.Set("Authorization", auth)
		resp, err := client.Do(req)
		must(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("Bearer tls-secret"); code != 200 {
		t.Errorf("notify over TLS with the secret: %d", code)
	}
	if code := post("Bearer other"); code != 401 {
		t.Errorf("notify over TLS with a wrong secret: %d, want 401", code)
	}
	if resp, err := http.Post("http://"+listen+"/notify", "application/json", strings.NewReader("{}")); err == nil {
		if resp.StatusCode == 200 {
			t.Error("plain HTTP answered 200 on a TLS endpoint")
		}
		resp.Body.Close()
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key.
func selfSigned(t testing.TB, dir string) (cert, key string) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ocierofs-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	must(t, err)
	kb, err := x509.MarshalECPrivateKey(k)
	must(t, err)
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	must(t, os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	must(t, os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600))
	return cert, key
}

// bombLayer is a gzip of a tar whose first file claims size bytes and
// stops after 64 KiB: over any bound below size, it is refused at that
// header (and without a bound, it is a truncated tar).
func bombLayer(t testing.TB, size int64) *blobLayer {
	var raw, gz bytes.Buffer
	tw := tar.NewWriter(&raw)
	must(t, tw.WriteHeader(&tar.Header{Name: "zeros", Typeflag: tar.TypeReg, Mode: 0o644, Size: size, ModTime: testTime}))
	_, err := tw.Write(make([]byte, 64<<10))
	must(t, err)
	zw := gzip.NewWriter(&gz)
	zw.Write(raw.Bytes())
	must(t, zw.Close())
	return &blobLayer{blob: gz.Bytes(), diffID: sha256Of(raw.Bytes())}
}

// serve and sync bound a layer without --max-layer-size: a layer over
// mirror.DefaultMaxLayerSize fails its task on the first attempt (no
// retry would download less), naming the bound.
func TestDefaultMaxLayerSize(t *testing.T) {
	bin := mirrorBinary(t)
	h := newHarness(t, "m", nil)
	var logs testregistry.Buffer
	w := exec.Command(bin, "serve", "--worker", "--nats", h.q.WorkerURL(), "--registry", h.reg.host, "--plain-http",
		"--listen", "127.0.0.1:0", "--name", "W", "-j", "1")
	w.Stdout, w.Stderr = &logs, &logs
	w.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, w.Start())
	t.Cleanup(func() {
		w.Process.Kill()
		w.Wait()
		if t.Failed() {
			t.Logf("the worker's log:\n%s", logs.String())
		}
	})
	d := h.reg.push(t, "bomb/zeros:1", image(t, bombLayer(t, mirror.DefaultMaxLayerSize+1<<30)))
	want := fmt.Sprintf("larger than the %d bytes", mirror.DefaultMaxLayerSize)
	r := h.waitRecord(t, "bomb/zeros", "1", d, time.Minute, func(r *mirror.Record) bool { return r.State == mirror.StateFailed })
	if r.Attempts != 1 || !strings.Contains(r.Error, want) {
		t.Errorf("serve: task failed on attempt %d with %q, want attempt 1 and %q", r.Attempts, r.Error, want)
	}

	list := filepath.Join(t.TempDir(), "list")
	must(t, os.WriteFile(list, []byte("bomb/zeros:1\n"), 0o644))
	out, err := exec.Command(bin, "sync", "--registry", h.reg.host, "--plain-http", "--list-file", list, "-q").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "failed: ") || !strings.Contains(string(out), want) {
		t.Errorf("sync: %v, %s; want the image failed with %q", err, out, want)
	}
}

// TestServeDefaultStore: `serve --registry HOST` starts as it is, with the
// embedded queue in the state directory ($XDG_STATE_HOME/ocierofs/nats).
func TestServeDefaultStore(t *testing.T) {
	bin := mirrorBinary(t)
	state := t.TempDir()
	listen := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var logs testregistry.Buffer
	cmd := exec.Command(bin, "serve", "--registry", "127.0.0.1:1", "--nats-listen", "127.0.0.1:0", "--listen", listen, "--tasks", "0")
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+state)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitReady(t, "http://"+listen, &logs)
	if _, err := os.Stat(filepath.Join(state, "ocierofs", "nats", "jetstream")); err != nil {
		t.Errorf("no queue in the state directory: %v\n%s", err, logs.String())
	}
}

// waitReady waits up to 30 s for serve at url to answer /readyz with 200.
func waitReady(t *testing.T, url string, logs *testregistry.Buffer) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve not ready in 30s:\n%s", logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
