package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// LayerEntry is a converted layer in the registry: what a source layer
// (on the same lower layers, with the same options) became, and the
// repository holding its blob, from which other repositories mount it.
type LayerEntry struct {
	Digest     string    `json:"digest"`
	DiffID     string    `json:"diffID"`
	MediaType  string    `json:"mediaType"`
	Size       int64     `json:"size"`
	SourceSize int64     `json:"sourceSize"`
	Repository string    `json:"repository"`
	Source     string    `json:"source"` // the source layer's digest
	Worker     string    `json:"worker,omitempty"`
	Created    time.Time `json:"created"`
}

// LayerCache is shared by every worker: one of them converts a layer, the
// others wait for it and reuse the result.
type LayerCache interface {
	// Claim returns the entry for key if there is one. Otherwise it makes
	// the caller its converter (claimed true) — waiting, while another
	// owner's claim is fresh, for that owner's entry.
	Claim(ctx context.Context, key, owner string) (e *LayerEntry, claimed bool, err error)
	// Refresh keeps the caller's claims on keys alive while it converts.
	// It returns the claims it found lost, by key, with who has the key
	// now: another worker took the claim over after the caller went the
	// ttl without a refresh (or stored the layer since).
	Refresh(ctx context.Context, keys []string, owner string) (lost map[string]string)
	// Store records the entry of a claimed key.
	Store(ctx context.Context, key string, e LayerEntry) error
	// Release gives up a claim (the conversion failed), so another worker
	// can take it at once.
	Release(ctx context.Context, key, owner string)
	// Forget drops an entry whose blob is gone from the registry.
	Forget(ctx context.Context, key string)
	// Skeleton returns the skeleton kept for key (see skeleton.go), or an
	// error; PutSkeleton keeps one.
	Skeleton(ctx context.Context, key string) ([]byte, error)
	PutSkeleton(ctx context.Context, key string, gz []byte) error
}

// cacheValue is what a key holds: a claim or an entry.
type cacheValue struct {
	Claim *claim      `json:"claim,omitempty"`
	Entry *LayerEntry `json:"entry,omitempty"`
}

type claim struct {
	Owner string    `json:"owner"`
	At    time.Time `json:"at"`
}

// kvCache keeps the layer cache in a JetStream key-value bucket.
type kvCache struct {
	kv   jetstream.KeyValue
	obj  jetstream.ObjectStore // skeletons
	ttl  time.Duration         // a claim not refreshed for this long is dead
	poll time.Duration
	mu   sync.Mutex
	revs map[string]uint64 // revisions of our claims
	// now stamps claims when they are written and judges their age
	// (TestClaimTakeover turns it by hand).
	now   func() time.Time
	waits func(owner string) // test hook: called each time Claim waits
}

// LayerCache returns the queue's layer cache; claims expire after ttl
// without a refresh (the queue's ack wait: the time after which a task is
// thought lost).
func (q *Queue) LayerCache() LayerCache {
	return &kvCache{kv: q.layers, obj: q.skeletons, ttl: time.Duration(q.cfg.Queue.AckWait), poll: 200 * time.Millisecond,
		revs: map[string]uint64{}, now: time.Now}
}

// claimOf is owner's claim as of now. A claim is made just before it is
// written: one made when Claim began to wait would be as old as the wait
// when it takes over a dead owner's, and the next waiter would take it
// over at once (TestClaimTakeover).
func (c *kvCache) claimOf(owner string) []byte {
	b, _ := json.Marshal(cacheValue{Claim: &claim{Owner: owner, At: c.now().UTC()}})
	return b
}

func (c *kvCache) Claim(ctx context.Context, key, owner string) (*LayerEntry, bool, error) {
	for {
		e, err := c.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			rev, err := c.kv.Create(ctx, key, c.claimOf(owner))
			if err == nil {
				c.setRev(key, rev)
				return nil, true, nil
			}
			if errors.Is(err, jetstream.ErrKeyExists) {
				continue // someone was quicker: look at theirs
			}
			return nil, false, fmt.Errorf("layer cache %s: %w", key, err)
		}
		if err != nil {
			return nil, false, fmt.Errorf("layer cache %s: %w", key, err)
		}
		var v cacheValue
		if err := json.Unmarshal(e.Value(), &v); err != nil || (v.Entry == nil && v.Claim == nil) {
			v.Claim = &claim{Owner: "?"} // unreadable: take it over
		}
		if v.Entry != nil {
			return v.Entry, false, nil
		}
		if v.Claim.Owner == owner || c.now().Sub(v.Claim.At) > c.ttl {
			rev, err := c.kv.Update(ctx, key, c.claimOf(owner), e.Revision())
			if err == nil {
				c.setRev(key, rev)
				return nil, true, nil
			}
			continue
		}
		if c.waits != nil {
			c.waits(owner)
		}
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(c.poll):
		}
	}
}

func (c *kvCache) setRev(key string, rev uint64) {
	c.mu.Lock()
	c.revs[key] = rev
	c.mu.Unlock()
}

func (c *kvCache) rev(key string) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.revs[key]
	return r, ok
}

// Refresh rewrites each claim at the revision it was last written at; one
// rewritten since by someone else is lost. A failed write whose key still
// holds our claim went through unanswered: its revision is taken. A key
// that cannot be read is tried again next time.
func (c *kvCache) Refresh(ctx context.Context, keys []string, owner string) map[string]string {
	var lost map[string]string
	for _, k := range keys {
		rev, ok := c.rev(k)
		if !ok {
			continue
		}
		nrev, err := c.kv.Update(ctx, k, c.claimOf(owner), rev)
		if err == nil {
			c.setRev(k, nrev)
			continue
		}
		holder, rev, err := c.holder(ctx, k)
		switch {
		case err != nil:
			continue
		case holder == owner:
			c.setRev(k, rev)
			continue
		}
		if lost == nil {
			lost = map[string]string{}
		}
		lost[k] = holder
		c.mu.Lock()
		delete(c.revs, k)
		c.mu.Unlock()
	}
	return lost
}

// holder says who has key now: the owner of its claim, the worker whose
// entry it holds, or nobody; with the key's revision.
func (c *kvCache) holder(ctx context.Context, key string) (string, uint64, error) {
	e, err := c.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "nobody (the key was deleted)", 0, nil
	}
	if err != nil {
		return "", 0, err
	}
	var v cacheValue
	json.Unmarshal(e.Value(), &v)
	switch {
	case v.Claim != nil:
		return v.Claim.Owner, e.Revision(), nil
	case v.Entry != nil:
		return fmt.Sprintf("%s, which stored the layer", v.Entry.Worker), e.Revision(), nil
	}
	return "nobody (an unreadable value)", e.Revision(), nil
}

func (c *kvCache) Store(ctx context.Context, key string, e LayerEntry) error {
	val, _ := json.Marshal(cacheValue{Entry: &e})
	_, err := c.kv.Put(ctx, key, val)
	c.mu.Lock()
	delete(c.revs, key)
	c.mu.Unlock()
	return err
}

func (c *kvCache) Release(ctx context.Context, key, owner string) {
	rev, ok := c.rev(key)
	if !ok {
		return
	}
	// Only if the claim is still ours (nobody took it over).
	c.kv.Delete(ctx, key, jetstream.LastRevision(rev))
	c.mu.Lock()
	delete(c.revs, key)
	c.mu.Unlock()
}

func (c *kvCache) Forget(ctx context.Context, key string) { c.kv.Delete(ctx, key) }

func (c *kvCache) Skeleton(ctx context.Context, key string) ([]byte, error) {
	return c.obj.GetBytes(ctx, key)
}

func (c *kvCache) PutSkeleton(ctx context.Context, key string, gz []byte) error {
	_, err := c.obj.PutBytes(ctx, key, gz)
	return err
}

// MemoryCache is a LayerCache for one process (sync without NATS).
func MemoryCache() LayerCache {
	return &memCache{m: map[string]*cacheValue{}, skel: map[string][]byte{}}
}

type memCache struct {
	mu   sync.Mutex
	m    map[string]*cacheValue
	skel map[string][]byte
}

func (c *memCache) Skeleton(_ context.Context, key string) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.skel[key]; ok {
		return b, nil
	}
	return nil, errNoSkeleton
}

func (c *memCache) PutSkeleton(_ context.Context, key string, gz []byte) error {
	c.mu.Lock()
	c.skel[key] = gz
	c.mu.Unlock()
	return nil
}

func (c *memCache) Claim(ctx context.Context, key, owner string) (*LayerEntry, bool, error) {
	for {
		c.mu.Lock()
		v := c.m[key]
		switch {
		case v == nil:
			c.m[key] = &cacheValue{Claim: &claim{Owner: owner, At: time.Now()}}
			c.mu.Unlock()
			return nil, true, nil
		case v.Entry != nil:
			c.mu.Unlock()
			return v.Entry, false, nil
		case v.Claim.Owner == owner:
			c.mu.Unlock()
			return nil, true, nil
		}
		c.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, false, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Refresh has nothing to do: one process's claims do not expire.
func (c *memCache) Refresh(context.Context, []string, string) map[string]string { return nil }

func (c *memCache) Store(_ context.Context, key string, e LayerEntry) error {
	c.mu.Lock()
	c.m[key] = &cacheValue{Entry: &e}
	c.mu.Unlock()
	return nil
}

func (c *memCache) Release(_ context.Context, key, owner string) {
	c.mu.Lock()
	if v := c.m[key]; v != nil && v.Claim != nil && v.Claim.Owner == owner {
		delete(c.m, key)
	}
	c.mu.Unlock()
}

func (c *memCache) Forget(_ context.Context, key string) {
	c.mu.Lock()
	delete(c.m, key)
	c.mu.Unlock()
}
