package mirror

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Task is one image to convert: a repository's manifest (or index) by
// digest, pushed under a tag. The twin is the same repository, tag plus
// the suffix.
type Task struct {
	ID         string    `json:"id"`
	Repository string    `json:"repository"`
	Tag        string    `json:"tag"`
	Digest     string    `json:"digest"`
	Origin     string    `json:"origin"` // distribution, harbor, sync
	Queued     time.Time `json:"queued"`
	// Stale: sync found the tag's twin missing or made from another
	// digest, so a finished record of this task is no reason to skip it
	// (the twin may have been deleted since). Not stored.
	Stale bool `json:"-"`
}

// TaskID is the same for every event about one digest under one tag, so
// duplicates collapse into one task.
func TaskID(repo, tag, digest string) string {
	h := sha256.Sum256([]byte(repo + "\x00" + tag + "\x00" + digest))
	return hex.EncodeToString(h[:12])
}

// State is where a task is.
type State string

const (
	StateQueued   State = "queued"
	StateRunning  State = "running"
	StateRetrying State = "retrying" // failed, another attempt is due
	StateDone     State = "done"
	StateSkipped  State = "skipped" // nothing to do (up to date, superseded, a converted image)
	StateFailed   State = "failed"  // no attempts left: Error says why
)

// Record is a task and what happened to it, as /status shows it.
type Record struct {
	Task
	State    State  `json:"state"`
	Attempts int    `json:"attempts"`
	Worker   string `json:"worker,omitempty"`
	Error    string `json:"error,omitempty"`
	Reason   string `json:"reason,omitempty"` // of a skip
	// Final: skipped for good (Outcome.Final); the task is not queued
	// again.
	Final    bool      `json:"final,omitempty"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished,omitzero"`
	// RetryAt is when a retrying task is due again.
	RetryAt time.Time `json:"retryAt,omitzero"`
	Target  string    `json:"target,omitempty"`
	Twin    string    `json:"twin,omitempty"` // digest of the pushed twin
	Seconds float64   `json:"seconds,omitempty"`
	// Layers converted here and reused from the layer cache.
	LayersConverted int `json:"layersConverted,omitempty"`
	LayersReused    int `json:"layersReused,omitempty"`
}

// pending reports whether a task in this state will still run.
func (s State) pending() bool { return s == StateQueued || s == StateRunning || s == StateRetrying }
