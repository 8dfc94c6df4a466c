package oci

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"
)

// DefaultStallTimeout is how long a registry request may move no bytes
// before it fails (Remote.StallTimeout).
const DefaultStallTimeout = time.Minute

// StallError is the error of a registry request whose bytes stopped
// flowing: no answer, no body bytes read or no upload bytes taken for
// Idle. It is transient (Timeout is true), so that the retries of a
// download, an upload or a mirror task take over.
type StallError struct {
	Method, URL string
	Idle        time.Duration
}

func (e *StallError) Error() string {
	return fmt.Sprintf("%s: no data for %s (the registry stalled)", describeRequest(e.Method, e.URL), e.Idle)
}

// Timeout and Temporary make a StallError a net.Error that times out.
func (e *StallError) Timeout() bool   { return true }
func (e *StallError) Temporary() bool { return true }

// describeRequest names what a registry URL is about: the blob or
// manifest, its repository and the registry.
func describeRequest(method, rawURL string) string {
	host, path := rawURL, ""
	if i := strings.Index(rawURL, "://"); i >= 0 {
		host = rawURL[i+3:]
	}
	if i := strings.IndexByte(host, '/'); i >= 0 {
		host, path = host[:i], host[i:]
	}
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	repo, kind, id, ok := splitRegistryPath(path)
	switch {
	case !ok:
		return fmt.Sprintf("%s %s on registry %s", method, path, host)
	case kind == "blobs" && strings.HasPrefix(id, "uploads"):
		return fmt.Sprintf("upload (%s) to %s on registry %s", method, repo, host)
	case kind == "blobs":
		return fmt.Sprintf("blob %s of %s on registry %s", id, repo, host)
	default:
		return fmt.Sprintf("manifest %s of %s on registry %s", id, repo, host)
	}
}

// splitRegistryPath splits /v2/REPO/{blobs,manifests}/ID.
func splitRegistryPath(p string) (repo, kind, id string, ok bool) {
	rest, found := strings.CutPrefix(p, "/v2/")
	if !found {
		return "", "", "", false
	}
	for _, k := range []string{"/blobs/", "/manifests/"} {
		if i := strings.Index(rest, k); i > 0 {
			return rest[:i], k[1 : len(k)-1], rest[i+len(k):], true
		}
	}
	return "", "", "", false
}

// stallTransport fails a request whose bytes stop flowing for d. The
// watch runs only while the request waits on the registry: while the
// upload is being sent or the answer awaited, and while a read of the
// answer's body is blocked. A reader that pauses between reads (a layer
// read only as far as the layer above needs it) is never cut, and neither
// is a slow transfer that still moves.
type stallTransport struct {
	base http.RoundTripper
	d    time.Duration
}

func (t stallTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancel(req.Context())
	// Armed before the timer starts: fire may run at once.
	w := &watchdog{err: &StallError{Method: req.Method, URL: req.URL.String(), Idle: t.d}, cancel: cancel, armed: true}
	w.mu.Lock()
	w.timer = time.AfterFunc(t.d, w.fire)
	w.mu.Unlock()
	req = req.WithContext(ctx)
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = &uploadBody{rc: req.Body, w: w}
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		w.stop()
		return nil, w.explain(err)
	}
	w.answered()
	resp.Body = &answerBody{rc: resp.Body, w: w}
	return resp, nil
}

// watchdog cancels a request when its timer runs out while armed.
type watchdog struct {
	mu     sync.Mutex
	timer  *time.Timer
	armed  bool
	answer bool // the response is in: the upload no longer arms the watch
	fired  bool
	done   bool
	err    *StallError
	cancel context.CancelFunc
}

func (w *watchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.armed && !w.done {
		w.fired = true
		w.cancel()
	}
}

// watch arms the watch for a full period of waiting on the registry, or
// disarms it. The upload's reads (upload) no longer count once the
// response is in: a registry may answer before it took the whole body.
func (w *watchdog) watch(on, upload bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.done || w.fired || (upload && w.answer):
	case on:
		w.armed = true
		w.timer.Reset(w.err.Idle)
	default:
		w.armed = false
		w.timer.Stop()
	}
}

// answered disarms the watch once the response's headers are in.
func (w *watchdog) answered() {
	w.mu.Lock()
	w.answer = true
	w.mu.Unlock()
	w.watch(false, false)
}

// stop ends the watch and releases the request's context.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done, w.armed = true, false
	w.timer.Stop()
	w.cancel()
}

// explain turns the error of a request the watchdog cancelled into a
// StallError.
func (w *watchdog) explain(err error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fired && err != nil && err != io.EOF {
		return w.err
	}
	return err
}

// uploadBody is a request's body: while the transport reads it, the wait
// is on the source, not the registry; between reads the transport is
// sending, and after the last one the answer is awaited.
type uploadBody struct {
	rc io.ReadCloser
	w  *watchdog
}

func (b *uploadBody) Read(p []byte) (int, error) {
	b.w.watch(false, true)
	n, err := b.rc.Read(p)
	b.w.watch(true, true)
	return n, err
}

func (b *uploadBody) Close() error { return b.rc.Close() }

// answerBody is a response's body: a blocked read waits on the registry.
// Closing it ends the watch.
type answerBody struct {
	rc io.ReadCloser
	w  *watchdog
}

func (b *answerBody) Read(p []byte) (int, error) {
	b.w.watch(true, false)
	n, err := b.rc.Read(p)
	b.w.watch(false, false)
	return n, b.w.explain(err)
}

func (b *answerBody) Close() error {
	err := b.rc.Close()
	b.w.stop()
	return err
}
