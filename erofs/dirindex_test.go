package erofs

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestDirIndex puts names, new and repeated, into a dirIndex and a map
// side by side: lookups, replacements and the order of the list agree.
func TestDirIndex(t *testing.T) {
	for _, n := range []int{1, dirIndexLinear, dirIndexLinear + 1, 1000} {
		rnd := rand.New(rand.NewPCG(uint64(n), 7))
		var d dirIndex
		want := map[string]*node{}
		var order []string
		for i := 0; i < 3*n; i++ {
			name := fmt.Sprintf("f%d", rnd.IntN(n))
			nd := &node{name: name}
			old := d.put(nd)
			if old != want[name] {
				t.Fatalf("n=%d: put(%q) replaced %p, want %p", n, name, old, want[name])
			}
			if want[name] == nil {
				order = append(order, name)
			}
			want[name] = nd
		}
		if len(d.list) != len(order) {
			t.Fatalf("n=%d: %d entries, want %d", n, len(d.list), len(order))
		}
		for i, name := range order {
			if d.list[i] != want[name] {
				t.Fatalf("n=%d: entry %d is %q, want %q in first-put order", n, i, d.list[i].name, name)
			}
			if d.get(name) != want[name] {
				t.Fatalf("n=%d: get(%q) is not the last put", n, name)
			}
		}
		if d.get("missing") != nil || d.get("") != nil {
			t.Fatalf("n=%d: get of a missing name found something", n)
		}
	}
}
