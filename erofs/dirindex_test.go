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
		// Remove every other name: the rest are found, in order, and
		// a removed name can be put again, at the end.
		var kept []string
		for i, name := range order {
			if i%2 == 1 {
				kept = append(kept, name)
				continue
			}
			if got := d.remove(name); got != want[name] {
				t.Fatalf("n=%d: remove(%q) = %p, want %p", n, name, got, want[name])
			}
			if d.get(name) != nil || d.remove(name) != nil {
				t.Fatalf("n=%d: %q still there after remove", n, name)
			}
		}
		for _, name := range kept {
			if d.get(name) != want[name] {
				t.Fatalf("n=%d: after removals, get(%q) is not its entry", n, name)
			}
		}
		live := d.entries()
		if len(live) != len(kept) {
			t.Fatalf("n=%d: %d entries after removals, want %d", n, len(live), len(kept))
		}
		for i, name := range kept {
			if live[i] != want[name] || d.get(name) != want[name] {
				t.Fatalf("n=%d: after removals, entry %d is not %q", n, i, name)
			}
		}
		back := &node{name: order[0]}
		if d.put(back) != nil || d.list[len(d.list)-1] != back || d.get(order[0]) != back {
			t.Fatalf("n=%d: a removed name put again is not found at the end", n)
		}
	}
}
