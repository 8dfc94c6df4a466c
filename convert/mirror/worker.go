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

// handle runs one delivery of a task: it claims the task, converts it
// while telling the queue the task is in progress, and records and
// acknowledges the outcome.
func (w *Worker) handle(ctx context.Context, msg jetstream.Msg) {
	rec, attempt, ok := w.claim(ctx, msg)
	if !ok {
		return
	}
	start := time.Now()
	out, err := w.convert(ctx, msg, rec.Task)
	secs := time.Since(start).Seconds()
	rec.Seconds = secs
	// The outcome is written even when ctx has ended: it hands the task
	// back.
	fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer fcancel()
	if out != nil {
		rec.Target, rec.Twin = out.Target, out.Digest
		rec.LayersConverted, rec.LayersReused = out.LayersConverted, out.LayersReused
	}
	switch {
	case err == nil:
		w.done(fctx, msg, rec, out)
	case ctx.Err() != nil:
		// Shutting down: hand the task back now rather than after the ack wait.
		rec.State, rec.Error = StateQueued, "interrupted: the worker stopped"
		w.Queue.putRecord(fctx, rec)
		msg.Nak()
	case attempt >= w.Queue.cfg.Queue.MaxDeliver || Permanent(err):
		w.failed(fctx, msg, rec, out, err)
	default:
		w.retry(fctx, msg, rec, out, err)
	}
}

// claim decodes the task of msg and records it as running on this
// worker, at attempt (the delivery count). It reports false when there is
// nothing to run: a malformed task (dropped), a record that cannot be
// read (redelivered soon), or a task already finished (acknowledged).
func (w *Worker) claim(ctx context.Context, msg jetstream.Msg) (rec *Record, attempt int, ok bool) {
	md, err := msg.Metadata()
	if err != nil {
		msg.Term()
		return nil, 0, false
	}
	var t Task
	if err := json.Unmarshal(msg.Data(), &t); err != nil || t.ID == "" {
		w.logf("dropping a malformed task (stream sequence %d): %v", md.Sequence.Stream, err)
		msg.TermWithReason("malformed task")
		return nil, 0, false
	}
	rec, _, err = w.Queue.Record(ctx, t.ID)
	if err != nil {
		msg.NakWithDelay(time.Second)
		return nil, 0, false
	}
	if rec == nil {
		rec = &Record{Task: t}
	}
	if rec.State == StateDone || rec.State == StateSkipped || rec.State == StateFailed {
		msg.Ack() // a redelivery after the record was written: the ack was lost
		return nil, 0, false
	}
	attempt = int(md.NumDelivered)
	if rec.State == StateRunning && rec.Worker != w.Name {
		w.logf("task %s: taking over from %s (attempt %d)", t.ID, rec.Worker, attempt)
	}
	rec.Task = t
	rec.State, rec.Attempts, rec.Worker, rec.Started, rec.RetryAt = StateRunning, attempt, w.Name, time.Now().UTC(), time.Time{}
	w.Queue.putRecord(ctx, rec)
	return rec, attempt, true
}

// convert makes the twin of t within the task timeout. Progress reports
// keep the task ours while it takes longer than the ack wait; claims on
// layers are refreshed as often.
func (w *Worker) convert(ctx context.Context, msg jetstream.Msg, t Task) (*Outcome, error) {
	cfg := w.Queue.cfg
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
	defer close(stop)
	tctx, cancel := context.WithTimeout(ctx, time.Duration(cfg.Queue.Timeout))
	defer cancel()
	return w.Twins.Convert(tctx, t, w.Name+"/"+t.ID)
}

// done records a task converted (or skipped) and acknowledges it.
func (w *Worker) done(ctx context.Context, msg jetstream.Msg, rec *Record, out *Outcome) {
	t := rec.Task
	rec.State, rec.Error, rec.Finished = StateDone, "", time.Now().UTC()
	result := "done"
	if out.Skipped {
		rec.State, rec.Reason, rec.Final, result = StateSkipped, out.Reason, out.Final, "skipped"
		w.logf("task %s %s:%s skipped: %s", t.ID, t.Repository, t.Tag, out.Reason)
	} else {
		w.logf("task %s %s:%s → %s@%s in %.2fs (%d layers converted, %d reused)", t.ID, t.Repository, t.Tag,
			out.Target, out.Digest, rec.Seconds, out.LayersConverted, out.LayersReused)
	}
	if out.Digest != "" { // made, or up to date: the tag's twin is this digest's
		w.Queue.setTagDigest(ctx, t.Repository, t.Tag, t.Digest)
	}
	// Record first, then ack: a crash in between redelivers a task
	// whose record says it is finished, and that is acked at once.
	w.Queue.putRecord(ctx, rec)
	msg.DoubleAck(ctx)
	w.Metrics.observe(result, rec.Seconds, out)
}

// failed records a task that failed for good, at its last attempt or with
// an error no retry can mend, and terminates it.
func (w *Worker) failed(ctx context.Context, msg jetstream.Msg, rec *Record, out *Outcome, err error) {
	t, maxDeliver := rec.Task, w.Queue.cfg.Queue.MaxDeliver
	rec.State, rec.Error, rec.Finished = StateFailed, err.Error(), time.Now().UTC()
	why := fmt.Sprintf("attempt %d of %d", rec.Attempts, maxDeliver)
	if Permanent(err) {
		why = "no retry can mend it"
	}
	w.logf("task %s %s:%s failed (%s): %v", t.ID, t.Repository, t.Tag, why, err)
	w.Queue.putRecord(ctx, rec)
	msg.TermWithReason(truncate(err.Error(), 200))
	w.Metrics.observe("failed", rec.Seconds, out)
}

// retry records a failed attempt and hands the task back to be delivered
// again after the backoff.
func (w *Worker) retry(ctx context.Context, msg jetstream.Msg, rec *Record, out *Outcome, err error) {
	t, maxDeliver := rec.Task, w.Queue.cfg.Queue.MaxDeliver
	d := w.backoff(rec.Attempts)
	rec.State, rec.Error, rec.RetryAt = StateRetrying, err.Error(), time.Now().Add(d).UTC()
	w.logf("task %s %s:%s: attempt %d of %d failed, retrying in %s: %v", t.ID, t.Repository, t.Tag, rec.Attempts, maxDeliver, d, err)
	w.Queue.putRecord(ctx, rec)
	msg.NakWithDelay(d)
	w.Metrics.observe("retry", rec.Seconds, out)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
