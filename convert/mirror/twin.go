package mirror

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/oci"
)

// Twins makes the EROFS twin of one image at a time, reusing converted
// layers through Cache.
type Twins struct {
	Registry  string
	PlainHTTP bool
	Suffix    string
	Remote    oci.Remote
	// Options are convert's; Publish, Progress and Log are set per image.
	Options convert.ImageOptions
	// Cache, if set, holds converted layers across images and workers.
	Cache LayerCache
	// ClaimRefresh is how often claimed layers are marked alive (default
	// 10s; a third of the queue's ack wait is right).
	ClaimRefresh time.Duration
	Log          func(string)
}

// Outcome is what Convert did.
type Outcome struct {
	Skipped bool
	Reason  string // why it was skipped
	// Final: skipped for good, whatever happens to the registry (a twin's
	// tag, an image ocierofs made): a task of the same tag and digest is
	// skipped again.
	Final           bool
	Target          string
	Digest          string // the twin's
	LayersConverted int
	LayersReused    int
	BytesIn         int64 // source layers converted
	BytesOut        int64 // converted layers produced
	// Cached layers read for their directories (below a converted one):
	// from their skeletons, or whole (the first time: a skeleton is made).
	SkeletonReads, LayerReads int
}

func (t *Twins) logf(format string, args ...any) {
	if t.Log != nil {
		t.Log(fmt.Sprintf(format, args...))
	}
}

func (t *Twins) ref(s string) (oci.Ref, error) { return oci.ParseRef(t.Registry+"/"+s, t.PlainHTTP) }

// errPermanent marks failures no retry can fix.
type errPermanent struct{ error }

func (e errPermanent) Unwrap() error { return e.error }

// Permanent reports whether a task error is not worth retrying.
func Permanent(err error) bool { return errors.As(err, new(errPermanent)) }

// Convert makes the twin of the image task names, unless it must not be
// made (the loop guard: a tag with the suffix, an image ocierofs made),
// is made already (the twin's source annotation is this digest), or the
// tag has moved on to another digest. owner names the claims on layers.
func (t *Twins) Convert(ctx context.Context, task Task, owner string) (*Outcome, error) {
	out := &Outcome{}
	if t.Suffix != "" && strings.HasSuffix(task.Tag, t.Suffix) {
		out.Skipped, out.Final, out.Reason = true, true, fmt.Sprintf("tag %q has the suffix %q (a twin)", task.Tag, t.Suffix)
		return out, nil
	}
	if task.Tag == "" {
		out.Skipped, out.Final, out.Reason = true, true, "pushed by digest only (part of an index, or untagged)"
		return out, nil
	}
	srcName := task.Repository + ":" + task.Tag
	if task.Digest != "" {
		srcName = task.Repository + "@" + task.Digest
	}
	src, err := t.ref(srcName)
	if err != nil {
		return nil, errPermanent{err}
	}
	tagRef, err := t.ref(task.Repository + ":" + task.Tag)
	if err != nil {
		return nil, errPermanent{err}
	}
	dst, err := oci.DefaultTarget(tagRef, t.Suffix)
	if err != nil {
		return nil, errPermanent{err}
	}
	out.Target = dst.String()
	ropts := t.Remote.Options(ctx)
	// A tag pushed again since: the newer task converts it.
	if now, moved := t.tagMoved(ctx, tagRef, task.Digest); moved {
		out.Skipped, out.Reason = true, fmt.Sprintf("superseded: %s is now %s", tagRef, now)
		return out, nil
	}
	art, err := oci.Get(ctx, src, t.Remote)
	if err != nil {
		return nil, classify(err)
	}
	if why := convert.Converted(art); why != "" {
		out.Skipped, out.Final, out.Reason = true, true, why
		return out, nil
	}
	if d, err := remote.Get(dst.Name, ropts...); err == nil {
		if convert.SourceAnnotation(d.Manifest) == art.Descriptor.Digest.String() {
			out.Skipped, out.Reason, out.Digest = true, "up to date: the twin's source is this digest", d.Digest.String()
			return out, nil
		}
	}
	job := &twinJob{t: t, owner: owner, out: out, dst: dst, ctx: ctx}
	defer job.cleanup()
	opt := t.Options
	opt.Progress = nil
	opt.Log = t.Log
	// The source is the registry's, its blobs checked as they download.
	opt.VerifiedSource = src.Kind == oci.Registry
	repo := dst.Name.Context()
	pubOpts := slices.Clip(ropts) // appended to by concurrent uploads
	opt.Publish = func(ctx context.Context, l v1.Layer) error {
		if err := remote.WriteLayer(repo, l, append(pubOpts, remote.WithContext(ctx))...); err != nil {
			return err
		}
		return job.published(l)
	}
	job.opt = opt
	conv, err := convert.NewConverter(opt)
	if err != nil {
		return nil, err
	}
	defer conv.Close()
	// Just before the twin's tag moves: has the source tag moved on while
	// this converted? Then the newer task's twin must not be overwritten.
	superseded := func() bool {
		if now, moved := t.tagMoved(ctx, tagRef, task.Digest); moved {
			out.Skipped, out.Reason, out.Digest = true, fmt.Sprintf("superseded while converting: %s is now %s", tagRef, now), ""
			return true
		}
		return false
	}
	tw, err := conv.WriteTwin(ctx, art, dst, t.Remote, convert.TwinHooks{
		Index: job.index,
		Image: job.image,
		Converted: func(reps []*convert.ImageReport) (bool, error) {
			if err := job.storePlain(art, reps); err != nil {
				return false, err
			}
			return !superseded(), nil
		},
	})
	if err != nil {
		return nil, classify(err)
	}
	if !tw.Written {
		return out, nil
	}
	out.Digest = tw.Digest
	job.done = true
	return out, nil
}

// tagMoved reports whether tag points at another digest than digest. The
// registry sends its event when the manifest is stored, before the tag is
// moved to it, so a tag still at an older digest is asked again for a few
// seconds before the task counts as superseded.
func (t *Twins) tagMoved(ctx context.Context, tag oci.Ref, digest string) (string, bool) {
	if digest == "" {
		return "", false
	}
	var now string
	for i := 0; i < 30; i++ {
		d, err := remote.Head(tag.Name, t.Remote.Options(ctx)...)
		if err != nil {
			return "", false // cannot tell: convert what was asked
		}
		if now = d.Digest.String(); now == digest {
			return "", false
		}
		select {
		case <-ctx.Done():
			return "", false
		case <-time.After(100 * time.Millisecond):
		}
	}
	return now, true
}

func isNotFound(err error) bool {
	var te *transport.Error
	return errors.As(err, &te) && te.StatusCode == 404
}

// twinJob is the state of one Convert: the layers it claimed, the layers
// it published.
type twinJob struct {
	t     *Twins
	ctx   context.Context
	owner string
	opt   convert.ImageOptions
	dst   oci.Ref
	out   *Outcome
	done  bool

	mu      sync.Mutex
	claimed map[string]bool          // keys claimed and not stored
	pubs    map[string]v1.Descriptor // published layers by EROFS diffID
	// plain are the source images converted without the cache (their
	// entries are stored from the reports).
	plain       map[v1.Hash]bool
	stopRefresh chan struct{}
	// converted are the layers counted in out, by chain: one shared by
	// the platforms of an index is converted, and counted, once.
	converted map[string]bool
}

// countConverted counts a converted layer in the outcome, once per chain.
func (j *twinJob) countConverted(chain string, in, out int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.converted[chain] {
		return
	}
	if j.converted == nil {
		j.converted = map[string]bool{}
	}
	j.converted[chain] = true
	j.out.LayersConverted++
	j.out.BytesIn += in
	j.out.BytesOut += out
}

func (j *twinJob) published(l v1.Layer) error {
	d, err := l.Digest()
	if err != nil {
		return err
	}
	diff, err := l.DiffID()
	if err != nil {
		return err
	}
	sz, err := l.Size()
	if err != nil {
		return err
	}
	mt, err := l.MediaType()
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.pubs == nil {
		j.pubs = map[string]v1.Descriptor{}
	}
	j.pubs[diff.String()] = v1.Descriptor{Digest: d, Size: sz, MediaType: mt}
	return nil
}

// classify marks as permanent the errors that convert and oci say no
// retry can fix: the source image is wrong or of a kind convert does not
// take, a layer is over the size bound (the next attempt would download
// it again), the source is gone, or it is a converted image. Any other
// error is worth another attempt.
func classify(err error) error {
	switch {
	case errors.As(err, new(*convert.SourceError)), errors.As(err, new(*convert.TooLargeError)),
		errors.Is(err, oci.ErrNotFound), errors.Is(err, oci.ErrLoop):
		return errPermanent{err}
	}
	return err
}

func (j *twinJob) cleanup() {
	if j.stopRefresh != nil {
		close(j.stopRefresh)
	}
	if j.t.Cache == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	j.mu.Lock()
	keys := make([]string, 0, len(j.claimed))
	for k := range j.claimed {
		keys = append(keys, k)
	}
	j.mu.Unlock()
	for _, k := range keys {
		j.t.Cache.Release(ctx, k, j.owner)
	}
}

// lostClaim notes that the claim on key went to by: this worker went the
// ack wait without a refresh reaching the queue (paused, cut off), and by
// took the layer over. The conversion goes on: by began later, so this
// one is the nearer to done, and both make the same bytes (and store
// entries of the same blob); stopping it would save only its remaining
// part and need a way back into waiting. Seen often, the ack wait is too
// short for the queue's latency.
func (j *twinJob) lostClaim(key, by string) {
	j.mu.Lock()
	delete(j.claimed, key)
	j.mu.Unlock()
	j.t.logf("layer cache %s: claim lost to %s (no refresh reached the queue for the ack wait); converting the layer anyway, to the same bytes", key, by)
}

// refreshClaims keeps the claims alive until the job ends.
func (j *twinJob) refreshClaims() {
	if j.stopRefresh != nil {
		return
	}
	j.stopRefresh = make(chan struct{})
	every := j.t.ClaimRefresh
	if every <= 0 {
		every = 10 * time.Second
	}
	go func() {
		tk := time.NewTicker(every)
		defer tk.Stop()
		for {
			select {
			case <-j.stopRefresh:
				return
			case <-tk.C:
				j.mu.Lock()
				keys := make([]string, 0, len(j.claimed))
				for k := range j.claimed {
					keys = append(keys, k)
				}
				j.mu.Unlock()
				for k, by := range j.t.Cache.Refresh(j.ctx, keys, j.owner) {
					j.lostClaim(k, by)
				}
			}
		}
	}()
}
