package fstree

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ocierofs/ocierofs/erofs"
)

// DiffOptions relaxes Diff.
type DiffOptions struct {
	// IgnoreImpliedMtime skips the mtime of directories marked Implied in
	// want: no entry gave them one, and extractors and builders differ.
	IgnoreImpliedMtime bool
	// IgnoreRootMeta skips mode, uid, gid, mtime and xattrs of ".", as when
	// got is an extraction whose root is a temporary directory.
	IgnoreRootMeta bool
	// IgnoreWhiteoutPerm skips the permission bits of overlayfs whiteouts
	// (char 0:0 on both sides), which overlayfs ignores and builders set
	// differently (mkfs.erofs: none; others: the .wh. entry's).
	IgnoreWhiteoutPerm bool
	// MtimeGranularity, when positive, compares mtimes truncated to it
	// (time.Second for a format without nanoseconds). Zero is exact.
	MtimeGranularity time.Duration
	// Want and Got, when set, name the two trees in the lines ("only in
	// source: a", "a: mode: source 0644, image 0600") instead of the
	// terse form.
	Want, Got string
	// Ignore, when set, drops a difference for which it returns true.
	// field is one of "missing", "extra", "type", "mode", "uid", "gid",
	// "mtime", "size", "content", "target", "rdev", "xattr:NAME" and
	// "links"; a hard-link difference is dropped when Ignore is true for
	// any path it involves.
	Ignore func(path, field string) bool
}

// Diff lists every difference between want and got, one line each:
//
//	missing: a/b                                (in want, not in got)
//	extra: c                                    (in got, not in want)
//	etc/passwd: mode 0100644 != 0100600         (PATH: FIELD WANT != GOT)
//	hard links: [a b] != [a] [b]
//
// Fields are type, mode (the 07777 bits; printed as full st_mode), uid,
// gid, mtime, size and content (regular files), target (symlinks), rdev
// (devices) and each xattr by name. Hard links are compared as groups among
// the paths both trees have. Lines come in Paths order, hard links last;
// the result is empty when the trees are equal.
func Diff(want, got *Tree, opt DiffOptions) []string {
	var out []string
	ignore := func(p, field string) bool { return opt.Ignore != nil && opt.Ignore(p, field) }
	l := labels{opt.Want, opt.Got}
	add := func(p, field, w, g string) {
		if !ignore(p, field) {
			out = append(out, l.line(p+": "+field, w, g))
		}
	}

	all := want.Paths()
	for _, p := range got.Paths() {
		if want.nodes[p] == nil {
			all = append(all, p)
		}
	}
	sortPaths(all)

	for _, p := range all {
		w, g := want.nodes[p], got.nodes[p]
		switch {
		case g == nil:
			if !ignore(p, "missing") {
				out = append(out, l.only(false, p))
			}
			continue
		case w == nil:
			if !ignore(p, "extra") {
				out = append(out, l.only(true, p))
			}
			continue
		}
		rootMeta := p == "." && opt.IgnoreRootMeta
		sameType := w.Type() == g.Type()
		if !sameType {
			add(p, "type", typeName(w.Mode), typeName(g.Mode))
		}
		whiteouts := opt.IgnoreWhiteoutPerm && isWhiteoutDev(w) && isWhiteoutDev(g)
		if !rootMeta {
			if w.Perm() != g.Perm() && !whiteouts {
				add(p, "mode", fmt.Sprintf("%#o", w.Mode), fmt.Sprintf("%#o", g.Mode))
			}
			if w.Uid != g.Uid {
				add(p, "uid", fmt.Sprint(w.Uid), fmt.Sprint(g.Uid))
			}
			if w.Gid != g.Gid {
				add(p, "gid", fmt.Sprint(w.Gid), fmt.Sprint(g.Gid))
			}
			skipMtime := opt.IgnoreImpliedMtime && w.Implied && w.IsDir()
			if !skipMtime && !sameMtime(w.Mtime, g.Mtime, opt.MtimeGranularity) {
				add(p, "mtime", fmtTime(w.Mtime), fmtTime(g.Mtime))
			}
		}
		if sameType {
			switch w.Type() {
			case erofs.S_IFREG:
				if w.Size != g.Size {
					add(p, "size", fmt.Sprint(w.Size), fmt.Sprint(g.Size))
				}
				if w.Digest != g.Digest {
					add(p, "content", fmt.Sprintf("sha256:%x", w.Digest), fmt.Sprintf("sha256:%x", g.Digest))
				}
			case erofs.S_IFLNK:
				if w.Target != g.Target {
					add(p, "target", fmt.Sprintf("%q", w.Target), fmt.Sprintf("%q", g.Target))
				}
			case erofs.S_IFCHR, erofs.S_IFBLK:
				if w.Devmajor != g.Devmajor || w.Devminor != g.Devminor {
					add(p, "rdev", fmt.Sprintf("%d:%d", w.Devmajor, w.Devminor), fmt.Sprintf("%d:%d", g.Devmajor, g.Devminor))
				}
			}
		}
		if !rootMeta {
			out = append(out, diffXattrs(p, w.Xattrs, g.Xattrs, ignore, l)...)
		}
	}
	return append(out, diffLinks(want, got, ignore, l)...)
}

// labels names want and got in Diff's lines, or not (the terse form).
type labels struct{ want, got string }

// line is "WHAT W != G", or "WHAT: WANT W, GOT G" with names.
func (l labels) line(what, w, g string) string {
	if l.want == "" {
		return what + " " + w + " != " + g
	}
	return strings.TrimSuffix(what, ":") + ": " + l.want + " " + w + ", " + l.got + " " + g
}

// only is the line of a path one tree lacks: "missing: p" (not in got)
// or "extra: p", or "only in NAME: p" with names.
func (l labels) only(inGot bool, p string) string {
	switch {
	case l.want == "" && inGot:
		return "extra: " + p
	case l.want == "":
		return "missing: " + p
	case inGot:
		return "only in " + l.got + ": " + p
	}
	return "only in " + l.want + ": " + p
}

func sameMtime(a, b time.Time, g time.Duration) bool {
	if g > 0 {
		return a.Truncate(g).Equal(b.Truncate(g))
	}
	return a.Equal(b)
}

func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

var typeNames = map[uint32]string{
	erofs.S_IFREG:  "reg",
	erofs.S_IFDIR:  "dir",
	erofs.S_IFLNK:  "symlink",
	erofs.S_IFCHR:  "char",
	erofs.S_IFBLK:  "block",
	erofs.S_IFIFO:  "fifo",
	erofs.S_IFSOCK: "socket",
}

func typeName(mode uint32) string {
	if name, ok := typeNames[mode&erofs.S_IFMT]; ok {
		return name
	}
	return fmt.Sprintf("type%#o", mode&erofs.S_IFMT)
}

func diffXattrs(p string, w, g map[string]string, ignore func(p, field string) bool, l labels) []string {
	val := func(m map[string]string, k string) string {
		if v, ok := m[k]; ok {
			return fmt.Sprintf("%q", v)
		}
		return "(none)"
	}
	names := map[string]string{}
	maps.Copy(names, w)
	maps.Copy(names, g)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(names)) {
		if wv, gv := val(w, k), val(g, k); wv != gv && !ignore(p, "xattr:"+k) {
			out = append(out, l.line(p+": xattr "+k, wv, gv))
		}
	}
	return out
}

// diffLinks compares the hard-link partitions of the paths both trees
// have. Paths linked in either tree form components; a component whose
// partition differs between the trees is one line.
func diffLinks(want, got *Tree, ignore func(p, field string) bool, l labels) []string {
	parent := make(map[string]string) // a union-find forest of the paths
	find := func(p string) string {
		for parent[p] != p {
			p = parent[p]
		}
		return p
	}
	for _, t := range []*Tree{want, got} {
		for _, g := range t.LinkGroups() {
			g = slices.DeleteFunc(g, func(p string) bool { return want.nodes[p] == nil || got.nodes[p] == nil })
			for _, p := range g {
				if _, ok := parent[p]; !ok {
					parent[p] = p
				}
				parent[find(p)] = find(g[0])
			}
		}
	}
	ps := slices.Collect(maps.Keys(parent))
	sortPaths(ps)
	var roots []string
	comps := make(map[string][]string)
	for _, p := range ps {
		r := find(p)
		if comps[r] == nil {
			roots = append(roots, r)
		}
		comps[r] = append(comps[r], p)
	}
	var out []string
	for _, r := range roots {
		c := comps[r]
		wp, gp := partition(want, c), partition(got, c)
		if wp != gp && !slices.ContainsFunc(c, func(p string) bool { return ignore(p, "links") }) {
			out = append(out, l.line("hard links:", wp, gp))
		}
	}
	return out
}

// partition formats how t groups the paths c (in Paths order) into inodes:
// "[a b] [c]".
func partition(t *Tree, c []string) string {
	var parts []string
	for _, g := range t.groups(c) {
		parts = append(parts, strings.Join(g, " "))
	}
	return "[" + strings.Join(parts, "] [") + "]"
}

func isWhiteoutDev(n *Node) bool {
	return n.Type() == erofs.S_IFCHR && n.Devmajor == 0 && n.Devminor == 0
}
