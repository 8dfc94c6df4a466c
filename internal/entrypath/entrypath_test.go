package entrypath

import "testing"

var cases = []string{
	"", ".", "./", "/", "//", "a", "a/", "./a", "./a/", "/a", "a//b", "a/./b", "a/../b",
	"../a", "a/..", "a/.", ".a", "..a", "a..", "a/.b/..c", "./.", "././a", "a/b/c/",
	"a\x00b", "usr/lib/x86_64-linux-gnu/libc.so.6",
}

// TestClean checks what Clean makes of names, and that the allocation-free
// path and the general one agree wherever the first answers.
func TestClean(t *testing.T) {
	for _, name := range cases {
		check(t, name)
	}
	for name, want := range map[string]string{"./a/b/": "a/b", "a/b": "a/b", "/a/../b": "b", ".": "", "/": "", "a/..": ""} {
		if got, err := Clean(name); err != nil || got != want {
			t.Errorf("Clean(%q) = %q, %v; want %q", name, got, err, want)
		}
	}
	for _, name := range []string{"../a", "a/../../b", "a\x00", "./.."} {
		if got, err := Clean(name); err == nil {
			t.Errorf("Clean(%q) = %q: no error", name, got)
		}
	}
}

// TestCleanAllocs: the names of a usual tar cost no allocation.
func TestCleanAllocs(t *testing.T) {
	for _, name := range []string{"usr/lib/libc.so.6", "./usr/lib/", "etc/"} {
		if n := testing.AllocsPerRun(100, func() { Clean(name) }); n != 0 {
			t.Errorf("Clean(%q): %v allocations", name, n)
		}
	}
}

func FuzzClean(f *testing.F) {
	for _, name := range cases {
		f.Add(name)
	}
	f.Fuzz(check)
}

func check(t *testing.T, name string) {
	fast, ok := cleanFast(name)
	slow, err := cleanSlow(name)
	if ok && (err != nil || fast != slow) {
		t.Errorf("%q: cleanFast gives %q, cleanSlow %q, %v", name, fast, slow, err)
	}
}
