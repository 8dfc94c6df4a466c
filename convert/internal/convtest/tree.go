package convtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ocierofs/ocierofs/convert/fstree"
)

// TreeFromTar is fstree.FromTar on the tar file at path.
func TreeFromTar(t testing.TB, path string, opt fstree.TarOptions) *fstree.Tree {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer f.Close()
	tr, err := fstree.FromTar(f, opt)
	if err != nil {
		t.Fatalf("fstree.FromTar(%s): %v", filepath.Base(path), err)
	}
	return tr
}

// TreeFromDir is fstree.FromDir.
func TreeFromDir(t testing.TB, dir string) *fstree.Tree {
	t.Helper()
	tr, err := fstree.FromDir(dir)
	if err != nil {
		t.Fatalf("fstree.FromDir(%s): %v", dir, err)
	}
	return tr
}

// ReportDiff makes every difference (of fstree.Diff) an error, under a
// heading; past forty it says how many more there are.
func ReportDiff(t testing.TB, what string, diffs []string) {
	t.Helper()
	const max = 40
	for i, d := range diffs {
		if i == max {
			t.Errorf("%s: … and %d more differences", what, len(diffs)-max)
			break
		}
		t.Errorf("%s: %s", what, d)
	}
}

// ModeOf is the permission bits of path p in a tree.
func ModeOf(t testing.TB, tr *fstree.Tree, p string) uint32 {
	t.Helper()
	n := tr.Node(p)
	if n == nil {
		t.Fatalf("no %s", p)
	}
	return n.Perm()
}

// ReadFile is os.ReadFile, failing the test on error.
func ReadFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	return b
}

// FirstDiff is the offset of the first byte where a and b differ (the
// shorter one's length if one is a prefix of the other).
func FirstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
