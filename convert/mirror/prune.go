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
		if it.Detail = sourceGone(r, srcTag, src, ropts); it.Detail != "" {
			orphans = append(orphans, it)
		} else {
			live[it.Twin] = true // its source is there, or not ours to judge
		}
	}
	for i := range orphans {
		orphans[i].byTag = live[orphans[i].Twin]
	}
	return orphans
}

// sourceGone says why the source of a twin tagged srcTag plus the suffix,
// made from src, is gone: the manifest src, or the tag srcTag (a twin of a
// source named by digest has no tag to look for); "" if it is there, or if
// the registry does not answer plainly (not ours to judge).
func sourceGone(r name.Repository, srcTag, src string, ropts []remote.Option) string {
	_, err := remote.Head(r.Digest(src), ropts...)
	switch {
	case isNotFound(err):
		return "its source " + src + " is gone"
	case err != nil || digestTag.MatchString(srcTag):
		return ""
	}
	if _, err := remote.Head(r.Tag(srcTag), ropts...); isNotFound(err) {
		return "its source tag " + srcTag + " is gone"
	}
	return ""
}

func sortItems(items []SyncItem) {
	sort.Slice(items, func(i, j int) bool {
		if items[i].Repository != items[j].Repository {
			return items[i].Repository < items[j].Repository
		}
		return items[i].Tag < items[j].Tag
	})
}

// stillOrphan says why it is no orphan any more ("" if it still is): its
// tag names another twin now, or its source is back.
func (s *Syncer) stillOrphan(r name.Repository, it *SyncItem, ropts []remote.Option) string {
	d, err := remote.Head(r.Tag(it.Tag), ropts...)
	switch {
	case err != nil:
		return "the twin tag cannot be read now: " + err.Error()
	case d.Digest.String() != it.Twin:
		return "the twin tag names " + d.Digest.String() + " now"
	}
	srcTag := strings.TrimSuffix(it.Tag, s.Config.Suffix)
	if sourceGone(r, srcTag, it.Digest, ropts) == "" {
		return "its source is back"
	}
	return ""
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
		if err == nil {
			// Judged again just before the delete: the source may have
			// been pushed again since Orphans looked, and its twin made
			// again under the tag.
			if why := s.stillOrphan(r, it, ropts); why != "" {
				it.Result, it.Detail = "kept", why
				s.logf("prune %s:%s: kept: %s", it.Repository, it.Tag, why)
				continue
			}
		}
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
