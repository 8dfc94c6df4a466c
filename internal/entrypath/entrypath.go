// Package entrypath cleans the names of tar entries into the paths of a
// tree, once for the packages that need it (whiteout's layer model, the
// erofs Builder): no leading "/" or "./", no trailing "/", "" for the
// root. A name that holds NUL or climbs above the root is an error, never
// silently re-rooted.
package entrypath

import (
	"errors"
	"path"
	"strings"
)

// Clean returns the tree path of a tar entry name.
func Clean(name string) (string, error) {
	if p, ok := cleanFast(name); ok {
		return p, nil
	}
	return cleanSlow(name)
}

// cleanFast returns the tree path of a name that is clean but for a
// leading "./" and a trailing "/", the usual forms in a tar, without
// allocating; ok is false for every other name.
func cleanFast(name string) (p string, ok bool) {
	p = strings.TrimSuffix(strings.TrimPrefix(name, "./"), "/")
	if p == "" {
		return "", false
	}
	start := 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			if p[i] == 0 {
				return "", false
			}
			continue
		}
		if c := p[start:i]; c == "" || c == "." || c == ".." {
			return "", false
		}
		start = i + 1
	}
	return p, true
}

// cleanSlow is Clean for any name.
func cleanSlow(name string) (string, error) {
	if strings.IndexByte(name, 0) >= 0 {
		return "", errors.New("name contains NUL")
	}
	depth := 0
	for c := range strings.SplitSeq(name, "/") {
		switch c {
		case "", ".":
		case "..":
			if depth--; depth < 0 {
				return "", errors.New("name escapes the root")
			}
		default:
			depth++
		}
	}
	return path.Clean("/" + name)[1:], nil
}
