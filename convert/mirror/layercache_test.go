package mirror

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// claimResult is what a Claim returned.
type claimResult struct {
	owner   string
	e       *LayerEntry
	claimed bool
	err     error
}

// Three workers claim one layer in the JetStream key-value bucket of an
// embedded NATS server. A holds it and dies (no refresh); once A's claim
// is older than the ttl one of B and C takes it over, and the other must
// keep waiting for that one's entry, while the taker refreshes, instead
// of taking over a claim written with the time its wait began (the layer
// was converted twice on a three-node cluster, issue 41). A, back from a
// pause, learns from Refresh that it lost the claim.
//
// The caches' clock is the test's: it moves only when the test says, and
// each time a claimant waits it hands the test its turn, so no step
// depends on how fast the machine is.
func TestClaimTakeover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	q := testQueue(ctx, t)
	ttl := time.Duration(q.cfg.Queue.AckWait)

	var clockMu sync.Mutex
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); return clock }
	advance := func(d time.Duration) { clockMu.Lock(); clock = clock.Add(d); clockMu.Unlock() }
	waited := make(chan string) // a claimant about to wait, until the test takes its name
	cache := func() *kvCache {
		c := q.LayerCache().(*kvCache)
		c.now, c.poll = now, time.Millisecond
		c.waits = func(owner string) {
			select {
			case waited <- owner:
			case <-ctx.Done():
			}
		}
		return c
	}
	const key = "chain-of-the-base-layer"
	a, b, c := cache(), cache(), cache()
	if _, claimed, err := a.Claim(ctx, key, "A"); err != nil || !claimed {
		t.Fatalf("A's claim on a new key: claimed %v, %v", claimed, err)
	}
	results := make(chan claimResult, 2)
	for owner, cc := range map[string]*kvCache{"B": b, "C": c} {
		go func() {
			e, claimed, err := cc.Claim(ctx, key, owner)
			results <- claimResult{owner, e, claimed, err}
		}()
	}
	// waitFor lets the claimants wait until owner has waited n times; a
	// Claim that returns meanwhile is a failure.
	waitFor := func(owner string, n int, what string) {
		t.Helper()
		for n > 0 {
			select {
			case o := <-waited:
				if o == owner {
					n--
				}
			case r := <-results:
				t.Fatalf("%s: %s's Claim returned (claimed %v, entry %v, %v)", what, r.owner, r.claimed, r.e, r.err)
			case <-ctx.Done():
				t.Fatalf("%s: %s never waited", what, owner)
			}
		}
	}
	waitFor("B", 1, "A holds the claim")
	waitFor("C", 1, "A holds the claim")

	advance(ttl + time.Second) // A is dead: no refresh for longer than the ttl
	var taker claimResult
	for taker.owner == "" {
		select {
		case <-waited:
		case taker = <-results:
		case <-ctx.Done():
			t.Fatal("nobody took over A's dead claim")
		}
	}
	if !taker.claimed || taker.err != nil {
		t.Fatalf("%s after A died: claimed %v, entry %v, %v; want the claim", taker.owner, taker.claimed, taker.e, taker.err)
	}
	tc, other := b, "C"
	if taker.owner == "C" {
		tc, other = c, "B"
	}
	// The first wait may be one decided before the takeover; the second
	// read the taker's claim.
	waitFor(other, 2, taker.owner+" just took the claim over")
	// The taker refreshes every third of the ttl: its claim stays alive
	// past the ttl since it took it.
	for range 2 {
		if lost := tc.Refresh(ctx, []string{key}, taker.owner); len(lost) != 0 {
			t.Fatalf("%s's refresh: lost %v", taker.owner, lost)
		}
		advance(ttl * 2 / 3)
		waitFor(other, 2, taker.owner+" refreshed its claim")
	}
	// A was only paused: its next refresh finds the claim taken.
	if lost := a.Refresh(ctx, []string{key}, "A"); lost[key] != taker.owner {
		t.Errorf("A's refresh after the takeover: lost %v, want %s: %s", lost, key, taker.owner)
	}
	a.Release(ctx, key, "A") // not A's any more: nothing happens

	want := LayerEntry{Digest: "sha256:0123", Worker: taker.owner}
	if err := tc.Store(ctx, key, want); err != nil {
		t.Fatal(err)
	}
	for {
		select {
		case <-waited:
			continue
		case r := <-results:
			if r.claimed || r.err != nil || r.e == nil || r.e.Digest != want.Digest {
				t.Errorf("%s after %s stored the layer: claimed %v, entry %+v, %v; want the entry", r.owner, taker.owner, r.claimed, r.e, r.err)
			}
		case <-ctx.Done():
			t.Fatalf("%s never got the entry %s stored", other, taker.owner)
		}
		break
	}
}

// testQueue is a queue on an embedded NATS server of the test's own.
func testQueue(ctx context.Context, t *testing.T) *Queue {
	cfg := &Config{}
	cfg.NATS.StoreDir, cfg.NATS.Listen = t.TempDir(), "127.0.0.1:0"
	cfg.SetDefaults()
	q, err := OpenQueue(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(q.Close)
	return q
}

// A refresh whose write went through but whose answer was lost leaves the
// claim ours at a revision we do not know: the next refresh takes that
// revision rather than calling the claim lost.
func TestRefreshUnanswered(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := testQueue(ctx, t).LayerCache().(*kvCache)
	const key = "k"
	if _, claimed, err := c.Claim(ctx, key, "A"); err != nil || !claimed {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	if _, err := c.kv.Put(ctx, key, c.claimOf("A")); err != nil { // the unanswered write
		t.Fatal(err)
	}
	for i := range 2 {
		if lost := c.Refresh(ctx, []string{key}, "A"); len(lost) != 0 {
			t.Fatalf("refresh %d: lost %v", i, lost)
		}
	}
	e, err := c.kv.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if rev, _ := c.rev(key); rev != e.Revision() {
		t.Errorf("after the refreshes: our revision %d, the key's %d", rev, e.Revision())
	}
}

// A job whose claim was taken over while it converted says so in its log
// at its next refresh, naming the taker, and no longer counts the claim
// as its own (cleanup does not release it).
func TestJobNoticesLostClaim(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := testQueue(ctx, t).LayerCache().(*kvCache)
	const key = "k"
	if _, claimed, err := c.Claim(ctx, key, "A/task"); err != nil || !claimed {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	logged := make(chan string, 1)
	tw := &Twins{Cache: c, ClaimRefresh: time.Millisecond, Log: func(s string) {
		select {
		case logged <- s:
		default:
		}
	}}
	j := &twinJob{t: tw, ctx: ctx, owner: "A/task", claimed: map[string]bool{key: true}}
	defer j.cleanup()
	if _, err := c.kv.Put(ctx, key, c.claimOf("B/task")); err != nil { // B took it over
		t.Fatal(err)
	}
	j.refreshClaims()
	select {
	case line := <-logged:
		if !strings.Contains(line, "claim lost to B/task") {
			t.Errorf("log: %q, want the claim lost to B/task", line)
		}
	case <-ctx.Done():
		t.Fatal("the job never noticed")
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.claimed[key] {
		t.Error("the job still counts the lost claim as its own")
	}
}
