package mirror

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server is serve's HTTP side: notifications in, health, metrics, status.
type Server struct {
	cfg     *Config
	q       *Queue
	metrics *Metrics
	logf    func(string, ...any)

	// Deletes prune the twins of their repository in the background, on
	// at most maxPruners goroutines, one pass per repository at a time: a
	// delete during a pass asks for another.
	ctx       context.Context
	cancel    context.CancelFunc
	mu        sync.Mutex
	closed    bool
	prunes    map[string]pruneState // by repository
	waiting   []string              // repositories whose pass is due, oldest first
	pruneFull bool                  // the waiting are maxPruneWaiting, and it is logged
	pruners   int                   // goroutines running passes
	wg        sync.WaitGroup

	// Refused requests are logged once per refusedLogEvery, with how
	// many there were: a flood must not flood the log.
	refusedMu     sync.Mutex
	refusedLogged time.Time
	refused       int
}

// refusedLogEvery is how often refused requests are logged at most.
const refusedLogEvery = 10 * time.Second

// pruneState is where a repository's prune is.
type pruneState int

const (
	pruneWaiting pruneState = iota + 1 // in waiting
	pruneRunning                       // a pass is under way
	pruneAgain                         // under way, and another is due after it
)

const (
	// maxPruners bounds the passes at once: many deletes (a bulk delete
	// in Harbor, forged events) must not flood the registry.
	maxPruners = 2
	// prunePassTimeout bounds a pass against a registry that does not
	// answer.
	prunePassTimeout = 5 * time.Minute
)

// maxPruneWaiting bounds the repositories whose pass is due: deletes in
// more repositories than that at once (forged, or a registry emptied) are
// answered "unpruned" and left to sync --prune, so that the server's
// memory does not grow with the names it is sent. (A variable for tests.)
var maxPruneWaiting = 10000

// NewServer makes the HTTP side of a mirror (q may be nil in a process
// that only converts: it answers health and metrics only).
func NewServer(cfg *Config, q *Queue, m *Metrics, logf func(string, ...any)) *Server {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{cfg: cfg, q: q, metrics: m, logf: logf, ctx: ctx, cancel: cancel, prunes: map[string]pruneState{}}
}

// Close stops the prunes under way and waits for them; deletes notified
// later prune nothing.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// Handler routes POST /notify, GET /healthz, /readyz, /metrics, /status
// and /status/ID.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /notify", s.withSecret(s.notify))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", s.ready)
	// Repositories, tags and errors: not for anyone.
	mux.HandleFunc("GET /status", s.withSecret(s.status))
	mux.HandleFunc("GET /status/{id}", s.withSecret(s.statusOne))
	if s.metrics != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.Registry, promhttp.HandlerOpts{}))
	}
	return mux
}

// HTTPServer is the server of h for serve: it gives a client a minute for
// a request, body included, and two for an idle connection, where a
// server without deadlines let clients that never finish a request hold
// connections until the process ran out of descriptors.
func HTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      5 * time.Minute, // a long /status
		IdleTimeout:       2 * time.Minute,
	}
}

// httpReadTimeout is the time a client has for a request (tests shorten it).
var httpReadTimeout = time.Minute

// LimitListener accepts at most n connections at once from ln; the rest
// wait in the kernel's backlog.
func LimitListener(ln net.Listener, n int) net.Listener {
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{}
	done      chan struct{} // closed by Close: Accept waits for a slot no more
	closeOnce sync.Once
}

func (l *limitListener) Close() error {
	err := l.Listener.Close()
	l.closeOnce.Do(func() { close(l.done) })
	return err
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: sync.OnceFunc(func() { <-l.sem })}, nil
}

type limitConn struct {
	net.Conn
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// EventResult is what became of one event of a notification.
type EventResult struct {
	Event
	// Result: queued, duplicate, filtered, loop, untagged, invalid; for a
	// delete, prune (its repository's orphan twins are being deleted) or
	// unpruned (too many repositories wait for a pass: sync --prune's).
	Result string `json:"result"`
	Task   string `json:"task,omitempty"`
	State  State  `json:"state,omitempty"`
}

// authorized compares the secret in constant time; "Bearer SECRET" is
// accepted as well as the bare value (what Harbor's auth_header and
// distribution's endpoint headers send is up to the operator).
func (s *Server) authorized(r *http.Request) bool {
	if s.cfg.Secret == "" {
		return true
	}
	got := r.Header.Get(s.cfg.SecretHeader)
	got = strings.TrimSpace(got)
	if b, ok := strings.CutPrefix(got, "Bearer "); ok {
		got = b
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Secret)) == 1
}

// withSecret serves h only for requests that carry the secret.
func (s *Server) withSecret(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.authorized(r) {
			s.refuse(w, r)
			return
		}
		h(w, r)
	}
}

// refuse answers a request without the secret: 401 at once, and the
// connection closed, so that the server does not first wait to drain a
// body the client may never send.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request) {
	s.count("unauthorized", 1)
	s.refusedMu.Lock()
	s.refused++
	if now := time.Now(); now.Sub(s.refusedLogged) >= refusedLogEvery {
		s.logf("%s %s from %s: wrong or missing %s (%d refused since the last such line)", r.Method, r.URL.Path, r.RemoteAddr, s.cfg.SecretHeader, s.refused)
		s.refusedLogged, s.refused = now, 0
	}
	s.refusedMu.Unlock()
	w.Header().Set("Connection", "close")
	http.Error(w, "unauthorized", http.StatusUnauthorized)
}

// maxNotification bounds a notification's body, which is read into
// memory: distribution batches a few events of under a kilobyte each,
// Harbor sends one; the bound is that of a manifest (oci.MaxManifestSize).
const maxNotification = 4 << 20

func (s *Server) notify(w http.ResponseWriter, r *http.Request) {
	body, err := s.readNotification(w, r)
	if err != nil {
		return
	}
	kind, events, err := ParseNotification(body)
	if err != nil {
		s.count("invalid", 1)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if s.q == nil {
		http.Error(w, "this process only converts (serve --worker)", http.StatusServiceUnavailable)
		return
	}
	resp := struct {
		Kind    string        `json:"kind"`
		Results []EventResult `json:"results"`
	}{Kind: kind, Results: []EventResult{}}
	for _, e := range events {
		if e.Action == "delete" {
			res := EventResult{Event: e, Result: s.triageDelete(e)}
			if res.Result == "" {
				res.Result = "prune"
				if !s.prune(e.Repository) {
					res.Result = "unpruned"
				}
			}
			s.count(res.Result, 1)
			resp.Results = append(resp.Results, res)
			continue
		}
		res := EventResult{Event: e, Result: s.triage(e)}
		if res.Result == "" {
			rec, dup, err := s.q.Enqueue(r.Context(), Task{Repository: e.Repository, Tag: e.Tag, Digest: e.Digest, Origin: kind})
			if err != nil {
				// The registry sends the notification again.
				s.logf("notify: %s:%s: %v", e.Repository, e.Tag, err)
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			res.Result, res.Task, res.State = "queued", rec.ID, rec.State
			if dup {
				res.Result = "duplicate"
			} else {
				s.logf("queued %s:%s@%s (task %s)", e.Repository, e.Tag, e.Digest, rec.ID)
			}
		}
		s.count(res.Result, 1)
		resp.Results = append(resp.Results, res)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// readNotification reads r's body, or answers the request and returns an
// error: a body over maxNotification gets 413 (a cut one would only fail
// to parse as JSON, which names no cause), unread if its length says so.
func (s *Server) readNotification(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	var body []byte
	err := errTooLarge
	if r.ContentLength <= maxNotification {
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, maxNotification))
	}
	if tooBig := new(http.MaxBytesError); errors.Is(err, errTooLarge) || errors.As(err, &tooBig) {
		s.count("oversized", 1)
		s.logf("notify from %s: body over %d bytes (4 MiB): refused with 413", r.RemoteAddr, maxNotification)
		w.Header().Set("Connection", "close") // the rest of the body is not read
		http.Error(w, fmt.Sprintf("notification body larger than %d bytes (4 MiB): refused", maxNotification), http.StatusRequestEntityTooLarge)
		return nil, err
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
	}
	return body, err
}

var errTooLarge = errors.New("notification too large")

// triage returns why an event is not queued ("" if it is).
func (s *Server) triage(e Event) string {
	switch {
	case s.isLoop(e):
		return "loop" // a twin (or its blobs) pushed by a worker
	case e.Tag == "":
		return "untagged"
	case !validEvent(e, s.cfg.Suffix):
		return "invalid"
	case !s.cfg.Rules.Match(e.Repository, e.Tag):
		return "filtered"
	}
	return ""
}

// isLoop reports an event about a twin: sent for ocierofs's own requests,
// or naming a tag with the suffix.
func (s *Server) isLoop(e Event) bool {
	return strings.Contains(strings.ToLower(e.UserAgent), "ocierofs") ||
		s.cfg.Suffix != "" && strings.HasSuffix(e.Tag, s.cfg.Suffix)
}

// triageDelete returns why a delete prunes nothing ("" if it prunes its
// repository): the twins ocierofs deletes come back as deletes too.
func (s *Server) triageDelete(e Event) string {
	switch {
	case s.isLoop(e):
		return "loop"
	case !validRepository(e.Repository):
		return "invalid"
	case !s.cfg.Rules.repoMayMatch(e.Repository):
		return "filtered"
	}
	return ""
}

// prune deletes the orphan twins of repo (Syncer.RepoOrphans), in the
// background: an image deleted from the registry (say, for a leaked
// secret) is not pullable as its twin for longer than that takes. Twins a
// server down at the time misses are left to sync --prune. It returns
// false if the repository is left to sync --prune: the server is closing,
// or maxPruneWaiting repositories wait already.
func (s *Server) prune(repo string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.prunes[repo] {
	case pruneRunning:
		s.prunes[repo] = pruneAgain // the pass under way may have missed it
		return true
	case pruneWaiting, pruneAgain:
		return true
	}
	if s.closed {
		return false
	}
	if len(s.waiting) >= maxPruneWaiting {
		if !s.pruneFull { // once per flood, not per delete
			s.logf("prune %s: %d repositories wait for a pass already: this and the deletes after it until one is done are left to sync --prune", repo, len(s.waiting))
			s.pruneFull = true
		}
		return false
	}
	s.pruneFull = false
	s.prunes[repo] = pruneWaiting
	s.waiting = append(s.waiting, repo)
	if s.pruners < maxPruners {
		s.pruners++
		s.wg.Go(s.pruner)
	}
	return true
}

// pruner runs the passes that are due until none is.
func (s *Server) pruner() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.waiting) > 0 && !s.closed {
		repo := s.waiting[0]
		s.waiting = s.waiting[1:]
		s.prunes[repo] = pruneRunning
		s.mu.Unlock()
		s.prunePass(repo)
		s.mu.Lock()
		if s.prunes[repo] == pruneAgain && !s.closed {
			s.prunes[repo] = pruneWaiting
			s.waiting = append(s.waiting, repo)
		} else {
			delete(s.prunes, repo)
		}
	}
	s.pruners--
}

func (s *Server) prunePass(repo string) {
	ctx, cancel := context.WithTimeout(s.ctx, prunePassTimeout)
	defer cancel()
	sy := &Syncer{Config: s.cfg, Logf: s.logf}
	items, err := sy.RepoOrphans(ctx, repo)
	if err != nil {
		s.logf("prune %s: %v", repo, err)
		s.countPruned("unlisted", 1)
		return
	}
	for _, it := range sy.Prune(ctx, items) {
		s.countPruned(it.Result, 1)
	}
}

func (s *Server) countPruned(result string, n int) {
	if s.metrics != nil {
		s.metrics.Pruned.WithLabelValues(result).Add(float64(n))
	}
}

// validEvent reports whether e names a repository, a digest and a tag
// that a twin tag (tag + suffix) can be made of: an event that does not
// would only make a task that fails.
func validEvent(e Event, suffix string) bool {
	if !validRepository(e.Repository) {
		return false
	}
	if _, err := v1.NewHash(e.Digest); err != nil {
		return false
	}
	_, err := name.NewTag("x:" + e.Tag + suffix)
	return err == nil
}

// validRepository reports whether repo names a repository (and does not
// climb out of the registry's paths).
func validRepository(repo string) bool {
	_, err := name.NewRepository(repo)
	return err == nil && !strings.Contains(repo, "..")
}

func (s *Server) count(result string, n int) {
	if s.metrics != nil {
		s.metrics.Events.WithLabelValues(result).Add(float64(n))
	}
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if s.q == nil {
		io.WriteString(w, "ok\n")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	if err := s.q.Ready(ctx); err != nil {
		http.Error(w, "queue: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	io.WriteString(w, "ok\n")
}

// Status is GET /status: the queue and every task record, newest first;
// ?state=failed (or any state) filters.
type Status struct {
	Waiting    int      `json:"waiting"`
	InProgress int      `json:"inProgress"`
	Tasks      []Record `json:"tasks"`
}

func (s *Server) status(w http.ResponseWriter, r *http.Request) {
	if s.q == nil {
		http.Error(w, "no queue", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	var st Status
	var err error
	if st.Waiting, st.InProgress, err = s.q.Depth(ctx); err != nil {
		http.Error(w, fmt.Sprintf("queue: %v", err), http.StatusServiceUnavailable)
		return
	}
	recs, err := s.q.Records(ctx)
	if err != nil {
		http.Error(w, fmt.Sprintf("tasks: %v", err), http.StatusServiceUnavailable)
		return
	}
	want := State(r.URL.Query().Get("state"))
	st.Tasks = []Record{}
	for _, rec := range recs {
		if want == "" || rec.State == want {
			st.Tasks = append(st.Tasks, rec)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(st)
}

func (s *Server) statusOne(w http.ResponseWriter, r *http.Request) {
	if s.q == nil {
		http.Error(w, "no queue", http.StatusServiceUnavailable)
		return
	}
	rec, _, err := s.q.Record(r.Context(), r.PathValue("id"))
	switch {
	case err != nil:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case rec == nil:
		http.Error(w, "no such task", http.StatusNotFound)
	default:
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(rec)
	}
}
