package erofs

import (
	"strings"
	"testing"
)

var cleanPathCases = []string{
	"", ".", "./", "/", "//", "a", "a/", "./a", "./a/", "/a", "a//b", "a/./b", "a/../b",
	"../a", "a/..", "a/.", ".a", "..a", "a..", "a/.b/..c", "./.", "././a", "a/b/c/",
	"a\x00b", strings.Repeat("n", MaxNameLen), strings.Repeat("n", MaxNameLen+1) + "/x",
	"d/" + strings.Repeat("n", MaxNameLen+1), "usr/lib/x86_64-linux-gnu/libc.so.6",
}

// TestCleanPath: entrypath.Clean's paths, with EROFS's bound on a name.
func TestCleanPath(t *testing.T) {
	for _, name := range cleanPathCases {
		_, err := CleanPath(name)
		if long := strings.Contains(name, strings.Repeat("n", MaxNameLen+1)); long != (err != nil && strings.Contains(err.Error(), "longer")) {
			t.Errorf("CleanPath(%q): %v", name, err)
		}
	}
	for name, want := range map[string]string{"./a/b/": "a/b", "a/b": "a/b", "/a/../b": "b", ".": ""} {
		if got, err := CleanPath(name); err != nil || got != want {
			t.Errorf("CleanPath(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"../a", "a/../../b", "a\x00"} {
		if _, err := CleanPath(name); err == nil {
			t.Errorf("CleanPath(%q): no error", name)
		}
	}
}

// TestCleanPathAllocs: the names of a usual tar cost no allocation (there
// is one per entry, twice: convert and the Builder both clean it).
func TestCleanPathAllocs(t *testing.T) {
	for _, name := range []string{"usr/lib/libc.so.6", "./usr/lib/", "etc/"} {
		if n := testing.AllocsPerRun(100, func() { CleanPath(name) }); n != 0 {
			t.Errorf("CleanPath(%q): %v allocations", name, n)
		}
	}
}
