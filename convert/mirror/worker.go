package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Worker takes tasks from the queue and makes their twins. A task is
// acknowledged only once its twin is pushed (or there is nothing to do),
// so a worker that dies mid-conversion loses nothing: after the ack wait,
// with no progress reported, the task goes to another worker.
type Worker struct {
	Name    string
	Queue   *Queue
	Twins   *Twins
	Metrics *Metrics
	// Concurrency is how many tasks run at once (default 1).
	Concurrency int
	Logf        func(string, ...any)
}

func (w *Worker) logf(format string, args ...any) {
	if w.Logf != nil {
		w.Logf(format, args...)
	}
}

// DefaultWorkerName is host:pid.
func DefaultWorkerName() string { return fmt.Sprintf("%s:%d", hostname(), os.Getpid()) }

// Run works until ctx ends; a task being converted then is handed back.
func (w *Worker) Run(ctx context.Context) error {
	n := w.Concurrency
	if n < 1 {
		n = 1
	}
	if w.Name == "" {
		w.Name = DefaultWorkerName()
	}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx)
		}()
	}
	wg.Wait()
	return ctx.Err()
}

func (w *Worker) loop(ctx context.Context) {
	for ctx.Err() == nil {
		// One message at a time: a worker holds only what it converts.
		batch, err := w.Queue.cons.Fetch(1, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			if ctx.Err() == nil {
				w.logf("queue: %v", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		for msg := range batch.Messages() {
			w.handle(ctx, msg)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) && ctx.Err() == nil {
			w.logf("queue: %v", err)
			sleep(ctx, time.Second)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// backoff is the delay after the attempt-th failure: Backoff doubled each
// time, at most ten times it.
func (w *Worker) backoff(attempt int) time.Duration {
	base := time.Duration(w.Queue.cfg.Queue.Backoff)
	d := base
	for i := 1; i < attempt && d < 10*base; i++ {
		d *= 2
	}
	return min(d, 10*base)
}

func (w *Worker) handle(ctx context.Context, msg jetstream.Msg) {
	cfg := w.Queue.cfg
	md, err := msg.Metadata()
	if err != nil {
		msg.Term()
		return
	}
	var t Task
	if err := json.Unmarshal(msg.Data(), &t); err != nil || t.ID == "" {
		w.logf("dropping a malformed task (stream sequence %d): %v", md.Sequence.Stream, err)
		msg.TermWithReason("malformed task")
		return
	}
	rec, _, err := w.Queue.Record(ctx, t.ID)
	if err != nil {
		msg.NakWithDelay(time.Second)
		return
	}
	if rec == nil {
		rec = &Record{Task: t}
	}
	if rec.State == StateDone || rec.State == StateSkipped || rec.State == StateFailed {
		msg.Ack() // a redelivery after the record was written: the ack was lost
		return
	}
	attempt := int(md.NumDelivered)
	if rec.State == StateRunning && rec.Worker != w.Name {
		w.logf("task %s: taking over from %s (attempt %d)", t.ID, rec.Worker, attempt)
	}
	rec.Task = t
	rec.State, rec.Attempts, rec.Worker, rec.Started, rec.RetryAt = StateRunning, attempt, w.Name, time.Now().UTC(), time.Time{}
	w.Queue.putRecord(ctx, rec)

	// Progress reports keep the task ours while it takes longer than the
	// ack wait; claims on layers are refreshed as often.
	beat := time.Duration(cfg.Queue.AckWait) / 3
	stop := make(chan struct{})
	go func() {
		tk := time.NewTicker(beat)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				msg.InProgress()
			}
		}
	}()
	tctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Queue.Timeout))
	start := time.Now()
	out, err := w.Twins.Convert(tctx, t, w.Name+"/"+t.ID)
	cancel()
	close(stop)
	secs := time.Since(start).Seconds()
	rec.Seconds = secs
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fcancel()
	if out != nil {
		rec.Target, rec.Twin = out.Target, out.Digest
		rec.LayersConverted, rec.LayersReused = out.LayersConverted, out.LayersReused
	}
	switch {
	case err == nil:
		rec.State, rec.Error, rec.Finished = StateDone, "", time.Now().UTC()
		result := "done"
		if out.Skipped {
			rec.State, rec.Reason, rec.Final, result = StateSkipped, out.Reason, out.Final, "skipped"
			w.logf("task %s %s:%s skipped: %s", t.ID, t.Repository, t.Tag, out.Reason)
		} else {
			w.logf("task %s %s:%s → %s@%s in %.2fs (%d layers converted, %d reused)", t.ID, t.Repository, t.Tag,
				out.Target, out.Digest, secs, out.LayersConverted, out.LayersReused)
		}
		if out.Digest != "" { // made, or up to date: the tag's twin is this digest's
			w.Queue.setTagDigest(fctx, t.Repository, t.Tag, t.Digest)
		}
		// Record first, then ack: a crash in between redelivers a task
		// whose record says it is finished, and that is acked at once.
		w.Queue.putRecord(fctx, rec)
		msg.DoubleAck(fctx)
		w.Metrics.observe(result, secs, out)
	case ctx.Err() != nil:
		// Shutting down: hand the task back now rather than after the ack wait.
		rec.State, rec.Error = StateQueued, "interrupted: the worker stopped"
		w.Queue.putRecord(fctx, rec)
		msg.Nak()
	case attempt >= cfg.Queue.MaxDeliver || Permanent(err):
		rec.State, rec.Error, rec.Finished = StateFailed, err.Error(), time.Now().UTC()
		why := fmt.Sprintf("attempt %d of %d", attempt, cfg.Queue.MaxDeliver)
		if Permanent(err) {
			why = "no retry can mend it"
		}
		w.logf("task %s %s:%s failed (%s): %v", t.ID, t.Repository, t.Tag, why, err)
		w.Queue.putRecord(fctx, rec)
		msg.TermWithReason(truncate(err.Error(), 200))
		w.Metrics.observe("failed", secs, out)
	default:
		d := w.backoff(attempt)
		rec.State, rec.Error, rec.RetryAt = StateRetrying, err.Error(), time.Now().Add(d).UTC()
		w.logf("task %s %s:%s: attempt %d of %d failed, retrying in %s: %v", t.ID, t.Repository, t.Tag, attempt, cfg.Queue.MaxDeliver, d, err)
		w.Queue.putRecord(fctx, rec)
		msg.NakWithDelay(d)
		w.Metrics.observe("retry", secs, out)
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
