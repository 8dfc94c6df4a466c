package mirror

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/ocierofs/ocierofs/convert"
)

// Pruning deletes the twins whose source is gone: an image deleted from
// the registry (often because it must not be pulled any more: a leaked
// secret, a vulnerability) would otherwise stay pullable as its twin. A
// twin is an orphan when the source manifest it names
// (org.ocierofs.source.digest) is gone from its repository, or its source
// tag (the twin's tag less the suffix) is. Only images made by ocierofs
// are ever deleted.

// digestTag is the tag a twin of a source named by digest has, less the
// suffix: the source has no tag to look for.
var digestTag = regexp.MustCompile(`^sha256-[0-9a-f]{64}$`)

// Orphans lists the twins of the selected repositories whose source is
// gone (Action "prune"), with why in Detail.
func (s *Syncer) Orphans(ctx context.Context) ([]SyncItem, error) {
	repos, err := s.tagLists(ctx)
	if err != nil {
		return nil, err
	}
	var out []SyncItem
	for _, rt := range repos {
		out = append(out, s.orphansOf(ctx, rt)...)
	}
	sortItems(out)
	return out, nil
}

// RepoOrphans is Orphans for one repository (a delete notification's).
func (s *Syncer) RepoOrphans(ctx context.Context, repo string) ([]SyncItem, error) {
	r, err := name.NewRepository(s.Config.Registry+"/"+repo, s.nameOpts()...)
	if err != nil {
		return nil, err
	}
	tags, err := remote.List(r, s.Config.Remote().Options(ctx)...)
	if isNotFound(err) {
		return nil, nil // no tags left: no twin either
	}
	if err != nil {
		return nil, fmt.Errorf("tags of %s: %w", repo, err)
	}
	out := s.orphansOf(ctx, repoTags{name: repo, repo: r, tags: tags})
	sortItems(out)
	return out, nil
}

// orphansOf lists the orphan twins among one repository's tags.
func (s *Syncer) orphansOf(ctx context.Context, rt repoTags) []SyncItem {
	cfg := s.Config
	ropts := cfg.Remote().Options(ctx)
	repo, r := rt.name, rt.repo
	// The same source gives the same twin: several twin tags may name one
	// manifest, which a delete by digest takes with it.
	live := map[string]bool{} // twin digests some live twin tag names
	var orphans []SyncItem
	for _, tag := range rt.tags {
		srcTag, ok := strings.CutSuffix(tag, cfg.Suffix)
		if !ok || srcTag == "" || !cfg.Rules.Match(repo, srcTag) {
			continue
		}
		twin, err := remote.Get(r.Tag(tag), ropts...)
		if err != nil {
			continue // gone meanwhile, or not readable: not ours to judge
		}
		src := convert.SourceAnnotation(twin.Manifest)
		if src == "" {
			continue // not made by ocierofs
		}
		it := SyncItem{Repository: repo, Tag: tag, Twin: twin.Digest.String(), Digest: src, Action: "prune"}
		if _, err := remote.Head(r.Digest(src), ropts...); isNotFound(err) {
			it.Detail = "its source " + src + " is gone"
		} else if err != nil {
			live[it.Twin] = true // not ours to judge: keep its manifest
			continue
		} else if !digestTag.MatchString(srcTag) {
			if _, err := remote.Head(r.Tag(srcTag), ropts...); isNotFound(err) {
				it.Detail = "its source tag " + srcTag + " is gone"
			}
		}
		if it.Detail != "" {
			orphans = append(orphans, it)
		} else {
			live[it.Twin] = true
		}
	}
	for i := range orphans {
		orphans[i].byTag = live[orphans[i].Twin]
	}
	return orphans
}

func sortItems(items []SyncItem) {
	sort.Slice(items, func(i, j int) bool {
		if items[i].Repository != items[j].Repository {
			return items[i].Repository < items[j].Repository
		}
		return items[i].Tag < items[j].Tag
	})
}

// Prune deletes the twins Orphans found: their manifests, by digest (the
// registry drops the tags that name them), or only their tags where another
// twin tag names the same manifest.
func (s *Syncer) Prune(ctx context.Context, items []SyncItem) []SyncItem {
	ropts := s.Config.Remote().Options(ctx)
	for i := range items {
		it := &items[i]
		if it.Action != "prune" {
			continue
		}
		r, err := name.NewRepository(s.Config.Registry+"/"+it.Repository, s.nameOpts()...)
		switch {
		case err != nil:
		case it.byTag:
			// Another twin tag still needs the manifest: only the tag
			// goes, where the registry deletes tags (Harbor does;
			// distribution deletes manifests only).
			if err = remote.Delete(r.Tag(it.Tag), ropts...); err != nil {
				err = fmt.Errorf("another twin tag names the same manifest, and deleting the tag alone failed: %w", err)
			}
		default:
			err = remote.Delete(r.Digest(it.Twin), ropts...)
		}
		if err != nil {
			it.Result, it.Detail = "failed", err.Error()
			s.logf("prune %s:%s: %v", it.Repository, it.Tag, err)
			continue
		}
		it.Result = "deleted"
		s.logf("pruned %s:%s (%s)", it.Repository, it.Tag, it.Detail)
	}
	return items
}
