package mirror

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/oci"
)

// SyncItem is one selected image and what sync does about it.
type SyncItem struct {
	Repository string `json:"repository"`
	Tag        string `json:"tag"`
	Digest     string `json:"digest,omitempty"`
	Target     string `json:"target,omitempty"`
	// Action: convert, up-to-date, skip (a converted image: Detail says
	// why), or error; prune for Orphans.
	Action string `json:"action"`
	// After a run: done, skipped, queued, duplicate or failed, and why;
	// after Prune: deleted, kept (no orphan any more) or failed.
	Result  string  `json:"result,omitempty"`
	Detail  string  `json:"detail,omitempty"`
	Twin    string  `json:"twin,omitempty"`
	Seconds float64 `json:"seconds,omitempty"`
	// byTag: prune deletes the twin tag only (its manifest is another
	// live twin tag's too).
	byTag bool
}

// Syncer converts what a registry holds already.
type Syncer struct {
	Config *Config
	Twins  *Twins
	// Queue, if set, receives the tasks instead of converting them here
	// (the workers of a serve cluster do).
	Queue *Queue
	// Jobs is how many images convert at once (default 1).
	Jobs int
	Logf func(string, ...any)
}

func (s *Syncer) logf(format string, args ...any) {
	if s.Logf != nil {
		s.Logf(format, args...)
	}
}

// Sources lists the selected repo:tag names: from the list file, or the
// registry's catalog and tag lists, filtered by the rules; tags with the
// suffix (twins) are never sources.
func (s *Syncer) Sources(ctx context.Context) ([]SyncItem, error) {
	cfg := s.Config
	var names []string
	if cfg.ListFile != "" {
		lines, err := readListFile(cfg.ListFile)
		if err != nil {
			return nil, fmt.Errorf("list file: %w", err)
		}
		names = lines
	} else {
		repos, err := s.tagLists(ctx)
		if err != nil {
			return nil, err
		}
		for _, rt := range repos {
			for _, t := range rt.tags {
				names = append(names, rt.name+":"+t)
			}
		}
	}
	var out []SyncItem
	for _, n := range names {
		repo, tag, ok := splitRepoTag(n)
		if !ok {
			return nil, fmt.Errorf("%q: want REPOSITORY:TAG", n)
		}
		if strings.HasSuffix(tag, cfg.Suffix) || !cfg.Rules.Match(repo, tag) {
			continue
		}
		out = append(out, SyncItem{Repository: repo, Tag: tag})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Repository != out[j].Repository {
			return out[i].Repository < out[j].Repository
		}
		return out[i].Tag < out[j].Tag
	})
	return out, nil
}

// repoTags is a repository of the registry and its tags.
type repoTags struct {
	name string
	repo name.Repository
	tags []string
}

// tagLists lists the registry's repositories that the rules may select
// (the catalog), with their tags.
func (s *Syncer) tagLists(ctx context.Context) ([]repoTags, error) {
	reg, err := name.NewRegistry(s.Config.Registry, s.nameOpts()...)
	if err != nil {
		return nil, err
	}
	ropts := s.Config.Remote().Options(ctx)
	all, err := remote.Catalog(ctx, reg, ropts...)
	if err != nil {
		return nil, fmt.Errorf("catalog of %s: %w", s.Config.Registry, err)
	}
	var out []repoTags
	for _, repo := range all {
		if !s.Config.Rules.repoMayMatch(repo) {
			continue
		}
		r, err := name.NewRepository(s.Config.Registry+"/"+repo, s.nameOpts()...)
		if err != nil {
			return nil, err
		}
		tags, err := remote.List(r, ropts...)
		if isNotFound(err) {
			// Listed, but without a tag (all deleted, or pushed by
			// digest only): distribution answers NAME_UNKNOWN.
			s.logf("sync: %s has no tags, skipped", repo)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("tags of %s: %w", repo, err)
		}
		out = append(out, repoTags{name: repo, repo: r, tags: tags})
	}
	return out, nil
}

func splitRepoTag(s string) (repo, tag string, ok bool) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || strings.Contains(s[i:], "/") {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

func (s *Syncer) nameOpts() []name.Option {
	if s.Config.PlainHTTP {
		return []name.Option{name.Insecure}
	}
	return nil
}

// Plan resolves each item's digest and decides: convert, up-to-date (the
// twin's source annotation is the digest the tag has now), or skip (an
// image ocierofs made, which a task would skip).
func (s *Syncer) Plan(ctx context.Context, items []SyncItem) []SyncItem {
	ropts := s.Config.Remote().Options(ctx)
	for i := range items {
		it := &items[i]
		src, err := oci.ParseRef(s.Config.Registry+"/"+it.Repository+":"+it.Tag, s.Config.PlainHTTP)
		if err != nil {
			it.Action, it.Detail = "error", err.Error()
			continue
		}
		dst, err := oci.DefaultTarget(src, s.Config.Suffix)
		if err != nil {
			it.Action, it.Detail = "error", err.Error()
			continue
		}
		it.Target = dst.String()
		d, err := remote.Head(src.Name, ropts...)
		if err != nil {
			it.Action, it.Detail = "error", err.Error()
			continue
		}
		it.Digest = d.Digest.String()
		if td, err := remote.Get(dst.Name, ropts...); err == nil && convert.SourceAnnotation(td.Manifest) == it.Digest {
			it.Action, it.Twin = "up-to-date", td.Digest.String()
			continue
		}
		// The manifest only of what would be converted: a GET counts as
		// a pull (Harbor's pull time and retention rules), a HEAD not.
		m, err := remote.Get(src.Name.Context().Digest(it.Digest), ropts...)
		if err != nil {
			it.Action, it.Detail = "error", err.Error()
			continue
		}
		it.Action = "convert"
		if why := convert.ConvertedManifest(m.Manifest); why != "" {
			it.Action, it.Detail = "skip", why // as a task would be
		}
	}
	return items
}

// Run converts (or queues) the items whose action is convert.
func (s *Syncer) Run(ctx context.Context, items []SyncItem) []SyncItem {
	jobs := max(s.Jobs, 1)
	sem := make(chan struct{}, jobs)
	var wg sync.WaitGroup
	for i := range items {
		it := &items[i]
		if it.Action != "convert" {
			continue
		}
		t := Task{ID: TaskID(it.Repository, it.Tag, it.Digest), Repository: it.Repository, Tag: it.Tag, Digest: it.Digest, Origin: "sync", Stale: true}
		if s.Queue != nil {
			rec, dup, err := s.Queue.Enqueue(ctx, t)
			switch {
			case err != nil:
				it.Result, it.Detail = "failed", err.Error()
			case dup:
				it.Result, it.Detail = "duplicate", "task "+rec.ID+" is "+string(rec.State)
			default:
				it.Result, it.Detail = "queued", "task "+rec.ID
			}
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			start := time.Now()
			out, err := s.Twins.Convert(ctx, t, "sync/"+t.ID)
			it.Seconds = time.Since(start).Seconds()
			switch {
			case err != nil:
				it.Result, it.Detail = "failed", err.Error()
				s.logf("%s:%s: %v", it.Repository, it.Tag, err)
			case out.Skipped:
				it.Result, it.Detail, it.Twin = "skipped", out.Reason, out.Digest
			default:
				it.Result, it.Twin = "done", out.Digest
				it.Detail = fmt.Sprintf("%d layers converted, %d reused", out.LayersConverted, out.LayersReused)
				s.logf("%s:%s → %s@%s in %.2fs (%s)", it.Repository, it.Tag, it.Target, out.Digest, it.Seconds, it.Detail)
			}
		}()
	}
	wg.Wait()
	return items
}

// Remote is the registry access of cfg: its user and password go to its
// registry and nowhere else.
func (c *Config) Remote() oci.Remote {
	r := oci.Remote{Insecure: c.Insecure}
	if c.Username == "" && c.Password == "" {
		return r
	}
	// Validate has refused a registry name WithCredential cannot take.
	r, _ = r.WithCredential(c.Registry, oci.Credential{Username: c.Username, Password: c.Password})
	return r
}
