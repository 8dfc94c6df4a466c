package mirror

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"
)

// Queue is the work-queue stream of tasks, its consumer, and the two
// key-value buckets: task records and the layer cache. Every serve and
// sync process of a mirror opens the same ones.
type Queue struct {
	cfg    *Config
	srv    *server.Server // the embedded server, if any
	nc     *nats.Conn
	js     jetstream.JetStream
	stream jetstream.Stream
	cons   jetstream.Consumer
	tasks  jetstream.KeyValue
	layers jetstream.KeyValue
	// skeletons of cached layers (skeleton.go), by cache key
	skeletons jetstream.ObjectStore
	subject   string // prefix of task subjects
	adv       *nats.Subscription
	storeLock *os.File // the flock on the embedded server's store
	token     string   // the embedded server's
}

// names used on the NATS side, from the configured prefix.
func (c *Config) streamName() string   { return upper(c.NATS.Prefix) + "_TASKS" }
func (c *Config) consumerName() string { return c.NATS.Prefix + "-workers" }

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// OpenQueue connects to cfg.NATS.URL, or starts the embedded server with
// its JetStream store in cfg.NATS.StoreDir, and makes sure the stream,
// consumer and buckets exist.
func OpenQueue(ctx context.Context, cfg *Config, logf func(string, ...any)) (*Queue, error) {
	q := &Queue{cfg: cfg, subject: cfg.NATS.Prefix + ".tasks"}
	url := cfg.NATS.URL
	opts := []nats.Option{nats.Name("ocierofs " + hostname()), nats.MaxReconnects(-1), nats.ReconnectWait(500 * time.Millisecond)}
	if url == "" {
		if err := q.startServer(); err != nil {
			return nil, err
		}
		url = q.srv.ClientURL()
		opts = append(opts, nats.Token(q.token))
		if logf != nil {
			logf("embedded NATS server on %s, JetStream store %s; workers elsewhere connect with nats://TOKEN@HOST:PORT, the token in %s",
				url, cfg.NATS.StoreDir, filepath.Join(cfg.NATS.StoreDir, tokenFile))
		}
	} else {
		// A cluster that is not up yet is waited for (setupPatiently),
		// as when the mirror's pods start before the NATS pods.
		opts = append(opts, nats.RetryOnFailedConnect(true))
		if cfg.NATS.Creds != "" {
			opts = append(opts, nats.UserCredentials(cfg.NATS.Creds))
		}
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		q.Close()
		return nil, fmt.Errorf("nats %s: %w", RedactURL(url), err)
	}
	q.nc = nc
	if err := q.setupPatiently(ctx, logf); err != nil {
		q.Close()
		return nil, err
	}
	return q, nil
}

// setupPatience bounds how long OpenQueue waits for a NATS cluster that
// is still electing its JetStream leader.
const setupPatience = 2 * time.Minute

// setupPatiently runs setup until it succeeds, fails for good, or
// setupPatience passes. A cluster whose nodes start together (as in a
// Kubernetes StatefulSet) times out JetStream requests, or answers 503,
// until its meta leader is elected; that is a wait, not an error.
func (q *Queue) setupPatiently(ctx context.Context, logf func(string, ...any)) error {
	deadline := time.Now().Add(setupPatience)
	wait := 500 * time.Millisecond
	for {
		err := q.setup(ctx)
		if err == nil || !jetStreamNotReady(err) || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		if logf != nil {
			logf("JetStream is not ready (%v); trying again in %v", err, wait)
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// jetStreamNotReady reports whether err is JetStream still starting: a
// request that timed out or found no responder, or a 503 answer.
func jetStreamNotReady(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503
	}
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders)
}

func (q *Queue) startServer() error {
	host, port := "127.0.0.1", 4222
	if h, p, err := net.SplitHostPort(q.cfg.NATS.Listen); err == nil {
		host = h
		if port, err = strconv.Atoi(p); err != nil {
			return fmt.Errorf("nats.listen %q: %w", q.cfg.NATS.Listen, err)
		}
		if port == 0 {
			port = server.RANDOM_PORT // "any free port", as for net.Listen
		}
	} else {
		return fmt.Errorf("nats.listen %q: %w", q.cfg.NATS.Listen, err)
	}
	dir := q.cfg.NATS.StoreDir
	if dir == "" {
		return errors.New("the embedded NATS server needs a JetStream store directory (nats.storeDir, --nats-store)")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	// One server per store: a second one on the same directory would
	// keep a task list of its own. The lock goes with the process.
	lock, err := os.OpenFile(filepath.Join(dir, ".ocierofs-store.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("the JetStream store %s is in use by another ocierofs-mirror serve", dir)
		}
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	q.storeLock = lock
	defer func() {
		if q.srv == nil { // not started: let go of the store
			lock.Close()
			q.storeLock = nil
		}
	}()
	if q.token, err = storeToken(dir); err != nil {
		return err
	}
	srv, err := server.NewServer(&server.Options{
		// Without it any local user (or, listening beyond loopback,
		// anyone) could write the layer cache, which workers trust
		// to name the blobs of twins.
		Authorization: q.token,
		ServerName:    "ocierofs-" + hostname(),
		Host:          host,
		Port:          port,
		JetStream:     true,
		StoreDir:      dir,
		NoSigs:        true,
		NoLog:         true,
	})
	if err != nil {
		return fmt.Errorf("embedded NATS server: %w", err)
	}
	srv.Start()
	if !srv.ReadyForConnections(20 * time.Second) {
		srv.Shutdown()
		return fmt.Errorf("embedded NATS server on %s did not start", q.cfg.NATS.Listen)
	}
	q.srv = srv
	return nil
}

func (q *Queue) setup(ctx context.Context) error {
	js, err := jetstream.New(q.nc)
	if err != nil {
		return err
	}
	q.js = js
	c := q.cfg
	q.stream, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        c.streamName(),
		Description: "ocierofs mirror: images to convert",
		Subjects:    []string{q.subject + ".>"},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    c.NATS.Replicas,
		Duplicates:  10 * time.Minute,
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", c.streamName(), err)
	}
	q.cons, err = js.CreateOrUpdateConsumer(ctx, c.streamName(), jetstream.ConsumerConfig{
		Durable:       c.consumerName(),
		Description:   "ocierofs mirror workers",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Duration(c.Queue.AckWait),
		MaxDeliver:    c.Queue.MaxDeliver,
		FilterSubject: q.subject + ".>",
		Replicas:      c.NATS.Replicas,
	})
	if err != nil {
		return fmt.Errorf("consumer %s: %w", c.consumerName(), err)
	}
	q.tasks, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      c.NATS.Prefix + "-tasks",
		Description: "ocierofs mirror: task records",
		TTL:         time.Duration(c.Queue.Keep),
		Storage:     jetstream.FileStorage,
		Replicas:    c.NATS.Replicas,
	})
	if err != nil {
		return fmt.Errorf("task bucket: %w", err)
	}
	q.layers, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:      c.NATS.Prefix + "-layers",
		Description: "ocierofs mirror: converted layers by source chain and options",
		Storage:     jetstream.FileStorage,
		Replicas:    c.NATS.Replicas,
	})
	if err != nil {
		return fmt.Errorf("layer bucket: %w", err)
	}
	q.skeletons, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      c.NATS.Prefix + "-skeletons",
		Description: "ocierofs mirror: directory records of cached layers",
		Storage:     jetstream.FileStorage,
		Replicas:    c.NATS.Replicas,
	})
	if err != nil {
		return fmt.Errorf("skeleton store: %w", err)
	}
	return nil
}

// Close disconnects and stops the embedded server.
func (q *Queue) Close() {
	if q.adv != nil {
		q.adv.Unsubscribe()
	}
	if q.nc != nil {
		q.nc.Drain()
		q.nc.Close()
	}
	if q.srv != nil {
		q.srv.Shutdown()
		q.srv.WaitForShutdown()
	}
	if q.storeLock != nil {
		q.storeLock.Close()
	}
}

// RedactURL hides the user, password or token of NATS URLs (a comma list)
// for a log line or an error: nats://TOKEN@host:4222 is nats://***@host:4222.
func RedactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		scheme, rest, ok := strings.Cut(u, "://")
		if !ok { // host:port alone, as the client takes it too
			scheme, rest = "", u
		} else {
			scheme += "://"
		}
		if at := strings.LastIndex(rest, "@"); at >= 0 {
			parts[i] = scheme + "***@" + rest[at+1:]
		}
	}
	return strings.Join(parts, ",")
}

// tokenFile, in the store directory, holds the embedded server's token.
const tokenFile = ".ocierofs-nats-token"

// storeToken returns the embedded server's token, made at its first start
// and kept in its store (0600): workers on other machines are given it.
func storeToken(dir string) (string, error) {
	p := filepath.Join(dir, tokenFile)
	if b, err := os.ReadFile(p); err == nil && len(strings.TrimSpace(string(b))) >= 32 {
		return strings.TrimSpace(string(b)), nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	tok := hex.EncodeToString(raw)
	// The store is locked by this process: no other writes it.
	f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	_, err = io.WriteString(f, tok+"\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return tok, err
}

// WorkerURL is the embedded server's address with its token, for workers
// on other machines ("" with an external server). It is a secret.
func (q *Queue) WorkerURL() string {
	if q.srv == nil {
		return ""
	}
	u := q.srv.ClientURL()
	return strings.Replace(u, "://", "://"+q.token+"@", 1)
}

// ClientURL is the embedded server's address ("" with an external one).
func (q *Queue) ClientURL() string {
	if q.srv == nil {
		return ""
	}
	return q.srv.ClientURL()
}

// Ready reports whether the queue can take and hand out tasks.
func (q *Queue) Ready(ctx context.Context) error {
	if !q.nc.IsConnected() {
		return fmt.Errorf("nats: %s", q.nc.Status())
	}
	_, err := q.cons.Info(ctx)
	return err
}

// Depth is the number of tasks waiting and being worked on.
func (q *Queue) Depth(ctx context.Context) (waiting, inProgress int, err error) {
	ci, err := q.cons.Info(ctx)
	if err != nil {
		return 0, 0, err
	}
	return int(ci.NumPending), ci.NumAckPending, nil
}

func taskKey(id string) string { return "t." + id }

// Enqueue queues t unless a task for the same digest and tag is queued,
// running, done or skipped already (dup is then true). A failed task is
// queued again: a new push of the same image is a retry.
func (q *Queue) Enqueue(ctx context.Context, t Task) (rec *Record, dup bool, err error) {
	if t.ID == "" {
		t.ID = TaskID(t.Repository, t.Tag, t.Digest)
	}
	if t.Queued.IsZero() {
		t.Queued = time.Now().UTC()
	}
	key := taskKey(t.ID)
	rec = &Record{Task: t, State: StateQueued}
	val, _ := json.Marshal(rec)
	rev, err := q.tasks.Create(ctx, key, val)
	if errors.Is(err, jetstream.ErrKeyExists) {
		e, gerr := q.tasks.Get(ctx, key)
		if gerr != nil {
			return nil, false, fmt.Errorf("task %s: %w", t.ID, gerr)
		}
		var old Record
		if err := json.Unmarshal(e.Value(), &old); err != nil {
			return nil, false, fmt.Errorf("task %s: record: %w", t.ID, err)
		}
		switch {
		case old.State == StateQueued && !q.hasMessage(ctx, t.ID):
			// Recorded, but the publish was lost (a crash in between).
			rev = e.Revision()
			rec = &old
		case old.State.pending():
			return &old, true, nil
		case old.State == StateSkipped && old.Final:
			// Skipped for good (an image ocierofs made): sync, finding
			// no twin, would queue it at every run.
			return &old, true, nil
		case (old.State == StateDone && !t.Stale || old.State == StateSkipped) && q.tagDigest(ctx, t.Repository, t.Tag) == t.Digest:
			// Finished, and the tag's twin is still this digest's.
			return &old, true, nil
		default:
			// Failed (a new push is a retry), or finished but the tag has
			// had another twin since (a rollback): queue it again.
			if rev, err = q.tasks.Update(ctx, key, val, e.Revision()); err != nil {
				return nil, false, fmt.Errorf("task %s: requeue: %w", t.ID, err)
			}
		}
	} else if err != nil {
		return nil, false, fmt.Errorf("task %s: %w", t.ID, err)
	}
	body, _ := json.Marshal(rec.Task)
	// The message ID makes a repeated publish of this revision a no-op.
	if _, err := q.js.Publish(ctx, q.subject+"."+t.ID, body, jetstream.WithMsgID(fmt.Sprintf("%s.%d", t.ID, rev))); err != nil {
		return nil, false, fmt.Errorf("task %s: publish: %w", t.ID, err)
	}
	return rec, false, nil
}

// tagKey names the record of which digest a tag's twin was last made
// from.
func tagKey(repo, tag string) string { return "g." + TaskID(repo, tag, "") }

func (q *Queue) tagDigest(ctx context.Context, repo, tag string) string {
	e, err := q.tasks.Get(ctx, tagKey(repo, tag))
	if err != nil {
		return ""
	}
	return string(e.Value())
}

// setTagDigest records that repo:tag's twin is now digest's.
func (q *Queue) setTagDigest(ctx context.Context, repo, tag, digest string) {
	q.tasks.Put(ctx, tagKey(repo, tag), []byte(digest))
}

func (q *Queue) hasMessage(ctx context.Context, id string) bool {
	_, err := q.stream.GetLastMsgForSubject(ctx, q.subject+"."+id)
	return err == nil
}

// Record returns a task's record (nil if there is none).
func (q *Queue) Record(ctx context.Context, id string) (*Record, uint64, error) {
	e, err := q.tasks.Get(ctx, taskKey(id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return nil, 0, fmt.Errorf("task %s: record: %w", id, err)
	}
	return &r, e.Revision(), nil
}

// putRecord stores a record whatever was there.
func (q *Queue) putRecord(ctx context.Context, r *Record) error {
	b, _ := json.Marshal(r)
	_, err := q.tasks.Put(ctx, taskKey(r.ID), b)
	return err
}

// Records lists every task record, newest first. One watch of the bucket
// delivers the latest value of every key (not a request per key).
func (q *Queue) Records(ctx context.Context) ([]Record, error) {
	w, err := q.tasks.Watch(ctx, "t.*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	var out []Record
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("task bucket: watch closed")
			}
			if e == nil { // the initial values are all delivered
				sort.Slice(out, func(i, j int) bool { return out[i].Queued.After(out[j].Queued) })
				return out, nil
			}
			var r Record
			if json.Unmarshal(e.Value(), &r) == nil {
				out = append(out, r)
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// WatchLostTasks records as failed the tasks whose last delivery never
// came back (a worker lost on the last attempt): the server announces them
// in a max-deliveries advisory and keeps the message, which is removed
// here. One process of a queue group handles each advisory.
func (q *Queue) WatchLostTasks(logf func(string, ...any)) error {
	subj := fmt.Sprintf("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.%s.%s", q.cfg.streamName(), q.cfg.consumerName())
	sub, err := q.nc.QueueSubscribe(subj, q.cfg.NATS.Prefix+"-advisories", func(m *nats.Msg) {
		var adv struct {
			StreamSeq  uint64 `json:"stream_seq"`
			Deliveries int    `json:"deliveries"`
		}
		if json.Unmarshal(m.Data, &adv) != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		raw, err := q.stream.GetMsg(ctx, adv.StreamSeq)
		if err != nil {
			return
		}
		var t Task
		if json.Unmarshal(raw.Data, &t) == nil && t.ID != "" {
			if r, _, err := q.Record(ctx, t.ID); err == nil && r != nil && r.State.pending() {
				r.State = StateFailed
				r.Finished = time.Now().UTC()
				who := "the worker that took it"
				if r.Worker != "" {
					who = "worker " + r.Worker
				}
				r.Error = fmt.Sprintf("no attempt left after %d deliveries: %s was lost without an answer", adv.Deliveries, who)
				if r.State == StateRunning {
					r.Error += " (it was converting)"
				}
				q.putRecord(ctx, r)
				if logf != nil {
					logf("task %s (%s:%s) failed: %s", t.ID, t.Repository, t.Tag, r.Error)
				}
			}
		}
		q.stream.DeleteMsg(ctx, adv.StreamSeq)
	})
	if err != nil {
		return err
	}
	q.adv = sub
	return nil
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}
