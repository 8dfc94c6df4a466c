package mirror

import (
	"fmt"
	"strings"
)

// Rules select images by "repository:tag". A pattern without a colon is
// about the repository alone (any tag). In patterns, * matches within one
// path element (no /), ** matches anything, ? one character other than /.
// No Include selects everything; Exclude wins over Include.
type Rules struct {
	Include []string `json:"include"`
	Exclude []string `json:"exclude"`
}

// Match reports whether repo:tag is selected.
func (r Rules) Match(repo, tag string) bool {
	name := repo + ":" + tag
	for _, g := range r.Exclude {
		if matchRule(g, repo, name) {
			return false
		}
	}
	if len(r.Include) == 0 {
		return true
	}
	for _, g := range r.Include {
		if matchRule(g, repo, name) {
			return true
		}
	}
	return false
}

func matchRule(g, repo, name string) bool {
	if !strings.Contains(g, ":") {
		return glob(g, repo)
	}
	return glob(g, name)
}

func checkGlob(g string) error {
	if g == "" {
		return fmt.Errorf("empty pattern")
	}
	if strings.Count(g, ":") > 1 {
		return fmt.Errorf("pattern %q: more than one colon (want REPO[:TAG])", g)
	}
	if strings.ContainsAny(g, "[]{}") {
		return fmt.Errorf("pattern %q: only *, ** and ? are special", g)
	}
	return nil
}

// glob matches s against p (see Rules). It backtracks, but patterns are
// short and names bounded, so the cost is small.
func glob(p, s string) bool {
	for len(p) > 0 {
		switch {
		case strings.HasPrefix(p, "**"):
			rest := strings.TrimLeft(p, "*")
			for i := 0; i <= len(s); i++ {
				if glob(rest, s[i:]) {
					return true
				}
			}
			return false
		case p[0] == '*':
			rest := p[1:]
			for i := 0; i <= len(s); i++ {
				if glob(rest, s[i:]) {
					return true
				}
				if i < len(s) && s[i] == '/' {
					return false
				}
			}
			return false
		case p[0] == '?':
			if s == "" || s[0] == '/' {
				return false
			}
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return s == ""
}

// repoMayMatch reports whether some tag of repo may be selected: sync
// skips listing the tags of the others, and a delete there prunes nothing.
func (r Rules) repoMayMatch(repo string) bool {
	for _, g := range r.Exclude {
		if !strings.Contains(g, ":") && glob(g, repo) {
			return false
		}
	}
	if len(r.Include) == 0 {
		return true
	}
	for _, g := range r.Include {
		rp, _, _ := strings.Cut(g, ":")
		if glob(rp, repo) {
			return true
		}
	}
	return false
}
