package convert_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/log"

	"github.com/ocierofs/ocierofs/convert/fstree"
)

// containerdApply applies layers, in order, to one directory with
// containerd's own applier (pkg/archive.Apply, whiteouts removing what
// they name), as its native snapshotter unpacks an image, and takes the
// tree it leaves.
func containerdApply(t testing.TB, layers [][]e2eEntry) (*fstree.Tree, error) {
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	ctx := log.WithLogger(context.Background(), log.L.WithField("test", "containerd"))
	log.L.Logger.SetLevel(log.ErrorLevel) // its warnings about ignored entries are expected
	for i, es := range layers {
		if _, err := archive.Apply(ctx, root, bytes.NewReader(e2eTar(t, es...))); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i+1, err)
		}
	}
	return fstree.FromDir(root)
}

// containerdDiff compares fstree.Stack's tree with containerd's. Left out,
// as no difference of stacking: the root's metadata (containerd ignores
// the root entry), the mtimes of directories (containerd's are those of
// the directories' last change, when a layer adds to a lower one), and
// the tar's trusted.overlay.* xattrs (containerd sets them).
func containerdDiff(stack, ctr *fstree.Tree) []string {
	return fstree.Diff(stack, ctr, fstree.DiffOptions{Want: "stack", Got: "containerd", Ignore: func(p, field string) bool {
		if p == "." && field != "type" {
			return true
		}
		if n := stack.Node(p); field == "mtime" && n != nil && n.IsDir() {
			return true
		}
		return strings.HasPrefix(field, "xattr:trusted.overlay.")
	}})
}

// oracleTally counts, over seeds, how containerd's applier and
// fstree.Stack (which the kernel's mounts of both conversions match)
// disagree: in acceptance, and in the trees of stacks both take.
type oracleTally struct {
	seeds, accept, trees int
	// classes: a difference's kind → seeds that show it; samples, the
	// first seed of each kind.
	classes map[string]int
	samples map[string]string
}

func (o *oracleTally) add(seed uint64, stack *fstree.Tree, stackErr string, ctr *fstree.Tree, ctrErr error) {
	if o.classes == nil {
		o.classes, o.samples = map[string]int{}, map[string]string{}
	}
	o.seeds++
	note := func(class, sample string) {
		o.classes[class]++
		if _, ok := o.samples[class]; !ok {
			o.samples[class] = fmt.Sprintf("seed %d: %s", seed, sample)
		}
	}
	switch {
	case stack == nil && ctrErr == nil:
		o.accept++
		note("refused by fstree.Stack only", stackErr)
	case stack != nil && ctrErr != nil:
		o.accept++
		note("refused by containerd only: "+errClass(ctrErr.Error()), ctrErr.Error())
	case stack != nil:
		d := containerdDiff(stack, ctr)
		if len(d) == 0 {
			return
		}
		o.trees++
		seen := map[string]bool{}
		for _, l := range d {
			c := diffClass(l)
			if !seen[c] {
				seen[c] = true
				note("tree: "+c, l)
			}
		}
	}
}

// errClass is an error without its paths.
func errClass(s string) string {
	for _, k := range []string{"not a directory", "no such file", "operation not permitted", "file exists", "invalid argument"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	return s
}

// diffClass is a difference line without its path and values: "only in
// containerd", "mode", "xattr user.k", "links".
func diffClass(l string) string {
	head, rest, ok := strings.Cut(l, ": ")
	switch {
	case strings.HasPrefix(l, "only in "):
		return head
	case !ok:
		return "links"
	}
	f, _, _ := strings.Cut(rest, ":")
	if strings.Contains(f, " ") && !strings.HasPrefix(f, "xattr ") {
		return "links"
	}
	return f
}

func (o *oracleTally) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "containerd's applier vs fstree.Stack over %d stacks: %d differ in acceptance, %d in trees", o.seeds, o.accept, o.trees)
	var ks []string
	for k := range o.classes {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		fmt.Fprintf(&b, "\n  %4d  %s  (%s)", o.classes[k], k, o.samples[k])
	}
	return b.String()
}
