package convert_test

// TestStackRandom is a randomized differential test of how layers stack.
// Each seed makes a stack of 2 to 5 small layers (files, directories,
// symlinks, hard links within and across layers, whiteouts, opaque
// markers, character devices 0:0, fifos, owners, modes, xattrs and mtimes
// (also of hard links, whose own header the inode does not take), entries
// listed twice, paths that change type within a layer) and compares, for
// the same layers:
//
//   - the stacked conversion, mounted and stacked with overlayfs, and the
//     flattened conversion, mounted, with fstree.Stack and with each other;
//   - check.Converted of either conversion against the source;
//   - fstree.Stack with containerd's own applier, the reference (ctrOracle:
//     pkg/archive.Apply into one directory, as its native snapshotter
//     unpacks, layer by layer), where every difference must be of a kind
//     docs/stacking.md lists, each a way in which it and the kernel's
//     overlayfs disagree;
//   - fstree.Stack with a second run of it, and, every 4th seed, each
//     conversion's digest with a second conversion's.
//
// The conversions, check and fstree.Stack must agree exactly, also in
// refusing a stack (all three), but for a hard link to a lower layer's
// file, which the stacked conversion refuses alone. A failing seed is
// printed as a stackCase of stackEdgeCases (TestStackEdges), to paste
// there once fixed.
//
//	STACK_RANDOM_SEEDS=0-999 go test ./convert -run 'TestStackRandom$' -count=1 -timeout 2h
//	STACK_RANDOM_SEEDS=0-2999 go test ./convert -run 'TestStackRandomContainerd$' -count=1 -timeout 1h
//	STACK_RANDOM_SHRINK=SEED[:KEY] go test ./convert -run 'TestStackRandomShrink$' -count=1 -v
//
// LO-HI includes both ends; a single number is one seed. With -v, or on a
// failure, the test logs the seeds, the images built, the stacks refused by
// all, the time, and how many seeds show each kind of difference with
// containerd. TestStackRandomContainerd compares with containerd alone,
// without converting. The shrinker drops layers and entries, and makes
// owners, modes and xattrs plainer, for as long as a failure remains whose
// comparison, or one of whose differences, contains KEY (any failure,
// without KEY); it logs the smallest stack. They need what TestStackEdges
// needs: root, EROFS, overlayfs and docker-registry (containerd's applier
// alone, root).

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/oci"
)

// stackRandomDefaultSeeds take about 35 s on a machine of 2 CPUs.
const stackRandomDefaultSeeds = "0-59"

func TestStackRandom(t *testing.T) {
	lo, hi := stackRandomSeeds(t, os.Getenv("STACK_RANDOM_SEEDS"))
	// The reason, once, rather than a skip in every seed.
	roundtrip.RequireMount(t)
	reg := sharedRegistry(t)
	start := time.Now()
	images, refused := 0, 0
	var oracle oracleTally
	for seed := lo; seed <= hi; seed++ {
		layers := randomStack(seed)
		var o *stackOutcome
		skipped := false
		ok := t.Run(fmt.Sprint(seed), func(t *testing.T) {
			defer func() { skipped = t.Skipped() }()
			o = runStackCase(t, reg, layers, seed%4 == 0)
			if len(o.errs) == 3 {
				t.Logf("refused by all: %s", o.errList())
			}
		})
		if skipped {
			// convtest.MountStack's overlay check, in each seed alike.
			t.Skipf("seed %d skipped (its log says why)", seed)
		}
		name := fmt.Sprintf("seed %d", seed)
		switch {
		case o != nil && len(o.fails) > 0:
			t.Errorf("%s fails: %s\n%s%s", name, strings.Join(o.keys(), "; "), o.report(12), stackCode(name, layers))
		case !ok:
			t.Errorf("%s fails (its log says why):\n%s", name, stackCode(name, layers))
		}
		if o != nil {
			oracle.add(seed, o.ctr)
			images += o.images
			if len(o.errs) == 3 {
				refused++
			}
		}
	}
	t.Logf("seeds %d-%d: %d images built, %d stacks refused by all, %s", lo, hi, images, refused, time.Since(start).Round(time.Millisecond))
	t.Log(oracle.String())
}

// TestStackRandomShrink makes a failing seed of TestStackRandom small.
func TestStackRandomShrink(t *testing.T) {
	s := os.Getenv("STACK_RANDOM_SHRINK")
	if s == "" {
		t.Skip("STACK_RANDOM_SHRINK=SEED[:KEY] is not set")
	}
	seedS, key, _ := strings.Cut(s, ":")
	seed, err := strconv.ParseUint(seedS, 10, 64)
	if err != nil {
		t.Fatalf("STACK_RANDOM_SHRINK=%s: want SEED or SEED:KEY", s)
	}
	roundtrip.RequireMount(t)
	reg := sharedRegistry(t)
	try := func(layers [][]convtest.Entry) *stackOutcome {
		var o *stackOutcome
		t.Run("try", func(t *testing.T) { o = runStackCase(t, reg, layers, false) })
		return o // nil if the candidate stopped its subtest: not the failure sought
	}
	fails := func(o *stackOutcome) bool {
		if o == nil {
			return false
		}
		for k, ls := range o.fails {
			if strings.Contains(k, key) {
				return true
			}
			for _, l := range ls {
				if strings.Contains(l, key) {
					return true
				}
			}
		}
		return false
	}
	layers := randomStack(seed)
	if !fails(try(layers)) {
		t.Fatalf("seed %d does not fail with %q", seed, key)
	}
	for changed := true; changed; {
		changed = false
		// Layer 1 stays: it has the root directory.
		for li := len(layers) - 1; li >= 1 && len(layers) > 2; li-- {
			cand := append(append([][]convtest.Entry{}, layers[:li]...), layers[li+1:]...)
			if fails(try(cand)) {
				layers, changed = cand, true
			}
		}
		for li := len(layers) - 1; li >= 0; li-- {
			for ei := len(layers[li]) - 1; ei >= 0; ei-- {
				if li == 0 && ei == 0 {
					continue
				}
				cand := append([][]convtest.Entry{}, layers...)
				cand[li] = append(append([]convtest.Entry{}, layers[li][:ei]...), layers[li][ei+1:]...)
				if fails(try(cand)) {
					layers, changed = cand, true
				}
			}
		}
		for li := range layers {
			for ei := range layers[li] {
				e := layers[li][ei]
				for _, plainer := range []func(convtest.Entry) convtest.Entry{
					func(e convtest.Entry) convtest.Entry { e.Hdr.PAXRecords = nil; return e },
					func(e convtest.Entry) convtest.Entry { e.Hdr.Uid, e.Hdr.Gid = 0, 0; return e },
					func(e convtest.Entry) convtest.Entry {
						if e.Hdr.Typeflag == tar.TypeDir {
							e.Hdr.Mode = 0o755
						} else if e.Hdr.Typeflag == tar.TypeReg && e.Hdr.Mode != 0 {
							e.Hdr.Mode = 0o644
						}
						return e
					},
				} {
					p := plainer(e)
					if entryCode(p) == entryCode(e) {
						continue
					}
					cand := append([][]convtest.Entry{}, layers...)
					cand[li] = append([]convtest.Entry{}, layers[li]...)
					cand[li][ei] = p
					if fails(try(cand)) {
						layers, e, changed = cand, p, true
					}
				}
			}
		}
	}
	o := try(layers)
	if o == nil {
		t.Fatalf("seed %d: the shrunk stack no longer fails:\n%s", seed, stackCode("shrunk", layers))
	}
	var b strings.Builder
	b.WriteString(o.report(-1))
	for _, x := range []struct {
		name string
		tr   *fstree.Tree
	}{{"fstree.Stack", o.stack}, {"stacked", o.stacked}, {"flattened", o.flat}} {
		fmt.Fprintf(&b, "%s:", x.name)
		if x.tr == nil {
			b.WriteString(" (none)\n")
			continue
		}
		for _, p := range x.tr.Paths() {
			n := x.tr.Node(p)
			fmt.Fprintf(&b, " %s(%o %d:%d", p, n.Mode, n.Uid, n.Gid)
			if n.Size > 0 {
				fmt.Fprintf(&b, " %dB", n.Size)
			}
			var ks []string
			for k := range n.Xattrs {
				ks = append(ks, k)
			}
			sort.Strings(ks)
			for _, k := range ks {
				fmt.Fprintf(&b, " %s=%q", k, n.Xattrs[k])
			}
			b.WriteString(")")
		}
		b.WriteString("\n")
	}
	if len(o.errs) > 0 {
		fmt.Fprintf(&b, "refused by %s\n", o.errList())
	}
	t.Logf("seed %d shrunk, key %q:\n%s\n%s", seed, key, stackCode(fmt.Sprintf("seed %d shrunk", seed), layers), b.String())
}

// stackRandomSeeds reads LO-HI or SEED, or gives the default range.
func stackRandomSeeds(t *testing.T, s string) (lo, hi uint64) {
	if s == "" {
		s = stackRandomDefaultSeeds
	}
	a, b, ok := strings.Cut(s, "-")
	if !ok {
		b = a
	}
	lo, err1 := strconv.ParseUint(a, 10, 64)
	hi, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil || lo > hi {
		t.Fatalf("STACK_RANDOM_SEEDS=%s: want LO-HI or SEED", s)
	}
	return lo, hi
}

// ---------------------------------------------------------------------------
// Generating stacks.

// stackGenContents are the files' contents, with their Go code; one is
// over a block, so that not every file is inline.
var stackGenContents = []struct {
	data []byte
	code string
}{
	{nil, "nil"},
	{[]byte("x\n"), `[]byte("x\n")`},
	{[]byte("y\n"), `[]byte("y\n")`},
	{[]byte("zz\n"), `[]byte("zz\n")`},
	{convtest.RandomBytes(77, 5000), "convtest.RandomBytes(77, 5000)"},
}

// stackGenNames are few, so that layers meet at the same paths.
var stackGenNames = []string{"a", "b", "c", "d"}

type stackGen struct {
	r     *rand.Rand
	known []string // paths of any layer so far, to come back to
	files []string // non-directories the layers below put, for hard links to them
}

func (g *stackGen) randPath() string {
	if len(g.known) > 0 && g.r.IntN(2) == 0 {
		p := g.known[g.r.IntN(len(g.known))]
		if strings.Count(p, "/") < 2 && g.r.IntN(3) == 0 {
			p += "/" + stackGenNames[g.r.IntN(len(stackGenNames))]
		}
		return p
	}
	depth := 1 + g.r.IntN(3)
	if g.r.IntN(2) == 0 {
		depth = 1 + g.r.IntN(2)
	}
	var parts []string
	for i := 0; i < depth; i++ {
		parts = append(parts, stackGenNames[g.r.IntN(len(stackGenNames))])
	}
	return strings.Join(parts, "/")
}

func (g *stackGen) remember(p string) {
	for _, k := range g.known {
		if k == p {
			return
		}
	}
	g.known = append(g.known, p)
}

func (g *stackGen) pick(xs ...int64) int64 { return xs[g.r.IntN(len(xs))] }

// decorate gives some entries an owner or an xattr, and a few directories
// a trusted.overlay.* xattr of the tar's own, which must neither make them
// opaque nor be kept.
func (g *stackGen) decorate(e convtest.Entry, dir bool) convtest.Entry {
	if g.r.IntN(4) == 0 {
		e = e.Own(int(g.pick(1, 1000)), int(g.pick(0, 2)))
	}
	if g.r.IntN(7) == 0 {
		e = e.Xattr("user.k", fmt.Sprint(g.r.IntN(2)))
	}
	if g.r.IntN(3) == 0 {
		e = e.At(convtest.MTime.Add(time.Duration(g.pick(-2, -1, 1)) * time.Hour))
	}
	if dir && g.r.IntN(20) == 0 {
		if g.r.IntN(2) == 0 {
			e = e.Xattr("trusted.overlay.opaque", "y")
		} else {
			e = e.Xattr("trusted.overlay.redirect", "/"+stackGenNames[g.r.IntN(4)])
		}
	}
	return e
}

// stamp gives some of the entries decorate leaves alone (symlinks, hard
// links, devices, fifos, whiteouts) an owner or an mtime, and some hard
// links a mode: a hard link's header is not its inode's, which its target
// gives.
func (g *stackGen) stamp(e convtest.Entry) convtest.Entry {
	if g.r.IntN(4) == 0 {
		e = e.Own(int(g.pick(1, 1000)), int(g.pick(0, 2)))
	}
	if g.r.IntN(3) == 0 {
		e = e.At(convtest.MTime.Add(time.Duration(g.pick(-2, -1, 1)) * time.Hour))
	}
	if e.Hdr.Typeflag == tar.TypeLink && g.r.IntN(3) == 0 {
		e = e.Mode(g.pick(0o600, 0o644, 0o755))
	}
	return e
}

func (g *stackGen) file(p string) convtest.Entry {
	c := stackGenContents[g.r.IntN(len(stackGenContents))]
	if len(c.data) > 100 && g.r.IntN(3) != 0 {
		c = stackGenContents[1] // the big one costs time: rarer
	}
	return g.decorate(convtest.File(p, g.pick(0o644, 0o644, 0o600, 0o755, 0o4755), c.data), false)
}

func (g *stackGen) dir(p string) convtest.Entry {
	return g.decorate(convtest.Dir(p, g.pick(0o755, 0o755, 0o700, 0o711, 0o750, 0o1777)), true)
}

// genLayerState is what the layer being made has put, so that no entry
// gets a non-directory of its own layer for a parent (which every
// applier refuses, and would leave little else tested) and hard links
// name a file of the same layer.
type genLayerState struct {
	nondir map[string]bool // non-directories the layer put that still stand
}

// pathWithin reports whether p is q or below it.
func pathWithin(p, q string) bool { return p == q || strings.HasPrefix(p, q+"/") }

func (s *genLayerState) drop(p string) {
	for q := range s.nondir {
		if pathWithin(q, p) {
			delete(s.nondir, q)
		}
	}
}

func (s *genLayerState) parentOK(p string) bool {
	for q := path.Dir(p); q != "."; q = path.Dir(q) {
		if s.nondir[q] {
			return false
		}
	}
	return true
}

// randomStack is seed's stack, the same on every machine.
func randomStack(seed uint64) [][]convtest.Entry {
	g := &stackGen{r: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15))}
	nl := 2 + g.r.IntN(4)
	var layers [][]convtest.Entry
	for li := 0; li < nl; li++ {
		var es []convtest.Entry
		if li == 0 {
			es = append(es, convtest.Dir(".", g.pick(0o755, 0o755, 0o700)))
		} else if g.r.IntN(15) == 0 {
			es = append(es, convtest.Dir(".", g.pick(0o755, 0o711)))
		}
		st := &genLayerState{nondir: map[string]bool{}}
		n := 1 + g.r.IntN(15)
		for tries := 0; len(es) < n+1 && tries < 200; tries++ {
			p := g.randPath()
			if !st.parentOK(p) {
				continue
			}
			add := func(e ...convtest.Entry) { es = append(es, e...) }
			switch k := g.r.IntN(100); {
			case k < 24:
				add(g.file(p))
				st.drop(p)
				st.nondir[p] = true
				g.remember(p)
			case k < 42:
				add(g.dir(p))
				st.drop(p) // a directory over a file of the layer replaces it
				g.remember(p)
			case k < 47:
				add(g.stamp(convtest.Symlink(p, []string{"a", "../b", "/c/d", "x/y"}[g.r.IntN(4)])))
				st.drop(p)
				st.nondir[p] = true
				g.remember(p)
			case k < 53: // a hard link to a non-directory of the layer, or of one below
				var ts []string
				for q := range st.nondir {
					if q != p && !pathWithin(q, p) {
						ts = append(ts, q)
					}
				}
				sort.Strings(ts) // the map's order is not the seed's
				if len(g.files) > 0 && (len(ts) == 0 || g.r.IntN(2) == 0) {
					ts = nil
					for _, q := range g.files {
						if q != p && !pathWithin(q, p) && !pathWithin(p, q) {
							ts = append(ts, q)
						}
					}
				}
				if len(ts) == 0 {
					continue
				}
				add(g.stamp(convtest.Hardlink(p, ts[g.r.IntN(len(ts))])))
				st.drop(p)
				st.nondir[p] = true
				g.remember(p)
			case k < 66:
				add(g.stamp(convtest.Whiteout(p)))
				st.drop(p)
				g.remember(p)
			case k < 75: // an opaque marker, in p's directory or the root
				d := path.Dir(p)
				if g.r.IntN(6) == 0 {
					d = "."
				}
				if d != "." && !st.parentOK(d+"/x") {
					continue
				}
				if d == "." {
					add(convtest.File("./.wh..wh..opq", 0, nil))
				} else {
					add(convtest.Opaque(d))
				}
			case k < 80: // a character device 0:0: a whiteout to overlayfs
				add(g.stamp(convtest.Node(p, tar.TypeChar, 0o600, 0, 0)))
				st.drop(p)
				g.remember(p)
			case k < 82:
				add(g.stamp(convtest.Node(p, tar.TypeFifo, 0o644, 0, 0)))
				st.drop(p)
				st.nondir[p] = true
				g.remember(p)
			case k < 86: // an entry of the layer, again
				if len(es) == 0 {
					continue
				}
				e := es[g.r.IntN(len(es))]
				q, _ := strings.CutSuffix(e.Hdr.Name, "/")
				if e.Hdr.Name == "./" || !st.parentOK(q) || e.Hdr.Typeflag == tar.TypeLink && !st.nondir[path.Clean(e.Hdr.Linkname)] {
					continue
				}
				add(e)
				b := path.Base(q)
				switch {
				case strings.HasPrefix(b, ".wh.") && b != ".wh..wh..opq":
					st.drop(path.Join(path.Dir(q), b[4:]))
				case strings.Contains(q, ".wh."):
				case e.Hdr.Typeflag == tar.TypeChar && e.Hdr.Devmajor == 0 && e.Hdr.Devminor == 0:
					st.drop(q)
				case e.Hdr.Typeflag == tar.TypeDir:
					st.drop(q)
				default:
					st.drop(q)
					st.nondir[q] = true
				}
			default: // a path that changes type within the layer
				kid := p + "/" + stackGenNames[g.r.IntN(4)]
				c := g.r.IntN(6)
				if c == 5 && !st.parentOK(kid) {
					continue
				}
				switch c {
				case 0:
					add(g.file(p), g.dir(p))
					st.drop(p)
				case 1:
					add(g.dir(p), g.file(kid), g.file(p))
					st.drop(p)
					st.nondir[p] = true
				case 2:
					add(convtest.Whiteout(p), g.file(p))
					st.drop(p)
					st.nondir[p] = true
				case 3:
					add(convtest.Whiteout(p), g.dir(p))
					st.drop(p)
				case 4:
					add(convtest.Whiteout(p), g.file(kid))
					st.drop(p)
					st.nondir[kid] = true
				case 5:
					add(g.file(kid), convtest.Opaque(p), g.dir(p))
					st.drop(p)
					st.nondir[kid] = true
				}
				g.remember(p)
				g.remember(kid)
			}
		}
		layers = append(layers, es)
		var put []string
		for q := range st.nondir {
			put = append(put, q)
		}
		sort.Strings(put)
		for _, q := range put {
			if !slices.Contains(g.files, q) {
				g.files = append(g.files, q)
			}
		}
	}
	return layers
}

// ---------------------------------------------------------------------------
// A stack as Go code.

// stackCode is layers as a stackCase of stackEdgeCases (which has root).
func stackCode(name string, layers [][]convtest.Entry) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{%q, []v1.Layer{\n", name)
	for _, es := range layers {
		b.WriteString("\te2eLayer(t,")
		for i, e := range es {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString("\n\t\t" + entryCode(e))
		}
		b.WriteString("),\n")
	}
	b.WriteString("}},")
	return b.String()
}

// entryCode is e as the e* helpers make it.
func entryCode(e convtest.Entry) string {
	h := e.Hdr
	var s string
	base := path.Base(h.Name)
	switch h.Typeflag {
	case tar.TypeDir:
		n := strings.TrimSuffix(h.Name, "/")
		if n == "" {
			n = "."
		}
		s = fmt.Sprintf("convtest.Dir(%q, 0o%o)", n, h.Mode)
		if s == `convtest.Dir(".", 0o755)` {
			s = "root"
		}
	case tar.TypeReg:
		switch {
		case h.Name == "./.wh..wh..opq":
			s = `convtest.File("./.wh..wh..opq", 0, nil)`
		case base == ".wh..wh..opq":
			s = fmt.Sprintf("convtest.Opaque(%q)", path.Dir(h.Name))
		case strings.HasPrefix(base, ".wh."):
			s = fmt.Sprintf("convtest.Whiteout(%q)", path.Join(path.Dir(h.Name), base[4:]))
		default:
			code := fmt.Sprintf("[]byte(%q)", e.Data)
			for _, c := range stackGenContents {
				if bytes.Equal(c.data, e.Data) {
					code = c.code
				}
			}
			s = fmt.Sprintf("convtest.File(%q, 0o%o, %s)", h.Name, h.Mode, code)
		}
	case tar.TypeSymlink:
		s = fmt.Sprintf("convtest.Symlink(%q, %q)", h.Name, h.Linkname)
	case tar.TypeLink:
		s = fmt.Sprintf("convtest.Hardlink(%q, %q)", h.Name, h.Linkname)
		if h.Mode != 0 {
			s += fmt.Sprintf(".Mode(0o%o)", h.Mode)
		}
	case tar.TypeChar:
		s = fmt.Sprintf("convtest.Node(%q, tar.TypeChar, 0o%o, %d, %d)", h.Name, h.Mode, h.Devmajor, h.Devminor)
	case tar.TypeFifo:
		s = fmt.Sprintf("convtest.Node(%q, tar.TypeFifo, 0o%o, 0, 0)", h.Name, h.Mode)
	default:
		s = fmt.Sprintf("/* type %c */ %q", h.Typeflag, h.Name)
	}
	if h.Uid != 0 || h.Gid != 0 {
		if s == "root" {
			s = `convtest.Dir(".", 0o755)`
		}
		s += fmt.Sprintf(".Own(%d, %d)", h.Uid, h.Gid)
	}
	if !h.ModTime.IsZero() && !h.ModTime.Equal(convtest.MTime) {
		if s == "root" {
			s = `convtest.Dir(".", 0o755)`
		}
		s += fmt.Sprintf(".At(convtest.MTime.Add(%d * time.Hour))", int(h.ModTime.Sub(convtest.MTime).Hours()))
	}
	var ks []string
	for k := range h.PAXRecords {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for _, k := range ks {
		if n, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			if s == "root" {
				s = `convtest.Dir(".", 0o755)`
			}
			s += fmt.Sprintf(".Xattr(%q, %q)", n, h.PAXRecords[k])
		}
	}
	return s
}

// ---------------------------------------------------------------------------
// One stack.

// stackOutcome is what one stack came to.
type stackOutcome struct {
	fails  map[string][]string // failed comparison → its differences
	errs   map[string]string   // who refused the stack → why
	images int                 // converted images built
	// What each shows, for the shrinker's report.
	stack, stacked, flat *fstree.Tree
	// How containerd's applier and fstree.Stack compare.
	ctr *ctrOutcome
}

func (o *stackOutcome) fail(key string, lines ...string) {
	if o.fails == nil {
		o.fails = map[string][]string{}
	}
	o.fails[key] = append(o.fails[key], lines...)
}

func (o *stackOutcome) keys() []string {
	var ks []string
	for k := range o.fails {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func (o *stackOutcome) errList() string {
	var ls []string
	for k, v := range o.errs {
		ls = append(ls, k+": "+v)
	}
	sort.Strings(ls)
	return strings.Join(ls, "; ")
}

// report lists the failed comparisons, up to max differences each (all,
// if max < 0).
func (o *stackOutcome) report(max int) string {
	var b strings.Builder
	for _, k := range o.keys() {
		fmt.Fprintf(&b, "  [%s]\n", k)
		for i, l := range o.fails[k] {
			if i == max {
				fmt.Fprintf(&b, "    … %d more\n", len(o.fails[k])-max)
				break
			}
			fmt.Fprintf(&b, "    %s\n", l)
		}
	}
	return b.String()
}

// runStackCase pushes layers as an image, converts it stacked and
// flattened, and compares; determinism converts each once more. It fails
// t only where it cannot go on (a helper's t.Fatal): the differences are
// the outcome's.
func runStackCase(t *testing.T, reg *testRegistry, layers [][]convtest.Entry, determinism bool) *stackOutcome {
	o := &stackOutcome{errs: map[string]string{}}
	var vl []v1.Layer
	for _, es := range layers {
		vl = append(vl, convtest.Layer(t, es...))
	}
	repo := uniq("e2e/stackrandom")
	srcRef := ref(t, reg.host, repo+":v1")
	pushImage(t, srcRef, convtest.Image(t, "amd64", vl...))

	if stack, err := stackLayers(vl); err != nil {
		o.errs["fstree.Stack"] = err.Error()
	} else {
		o.stack = stack
		if again, err := stackLayers(vl); err != nil {
			o.fail("nondeterministic fstree.Stack", "the second run: "+err.Error())
		} else if d := fstree.Diff(stack, again, fstree.DiffOptions{}); len(d) > 0 {
			o.fail("nondeterministic fstree.Stack", d...)
		}
	}
	o.ctr = ctrOracle(t, layers)
	if len(o.ctr.unexplained) > 0 {
		o.fail("containerd vs fstree.Stack, unexplained", o.ctr.unexplained...)
	}

	// overlayfs hides its trusted.overlay.* from listxattr.
	ignoreOverlay := func(p, field string) bool { return strings.HasPrefix(field, "xattr:trusted.overlay.") }
	for _, flat := range []bool{false, true} {
		who := map[bool]string{false: "stacked", true: "flattened"}[flat]
		tag := fmt.Sprintf("flat-%v", flat)
		target := reg.host + "/" + repo + ":" + tag
		// Quiet: a seed's log is for what it found.
		opt := convert.ImageOptions{Flatten: flat, Log: func(string) {}}
		res, err := convertRef(context.Background(), t, srcRef.String(), target, opt, oci.Remote{})
		if err != nil {
			o.errs[who] = err.Error()
			continue
		}
		o.images++
		img, _ := remoteImage(t, ref(t, reg.host, repo+":"+tag))
		got, err := fstree.FromDir(convtest.MountStack(t, convtest.RawLayers(t, img, t.TempDir())))
		if err != nil {
			o.fail("mount unreadable "+who, err.Error())
			continue
		}
		if flat {
			o.flat = got
		} else {
			o.stacked = got
		}
		if o.stack != nil {
			if d := fstree.Diff(o.stack, got, fstree.DiffOptions{IgnoreImpliedMtime: true, Ignore: ignoreOverlay, Want: "stack", Got: who}); len(d) > 0 {
				o.fail("fstree.Stack vs "+who, d...)
			}
		}
		if diffs, err := checkAgainstSource(t, target, srcRef.String()); err != nil {
			o.fail("check "+who+" error", err.Error())
		} else if len(diffs) > 0 {
			o.fail("check "+who, diffs...)
		}
		if determinism {
			res2, err := convertRef(context.Background(), t, srcRef.String(), target+"-again", opt, oci.Remote{})
			if err != nil {
				o.fail("second conversion "+who, err.Error())
			} else if res2.digest != res.digest {
				o.fail("nondeterministic "+who, res.digest+" then "+res2.digest)
			}
			o.images++
		}
	}
	if o.stacked != nil && o.flat != nil {
		// A directory no layer declares takes the builder's mtime, which
		// depends on the entries of the image it is in.
		ignore := func(p, field string) bool {
			n := o.stack.Node(p)
			return ignoreOverlay(p, field) || field == "mtime" && n != nil && n.Implied
		}
		if o.stack == nil {
			ignore = ignoreOverlay
		}
		if d := fstree.Diff(o.stacked, o.flat, fstree.DiffOptions{Ignore: ignore, Want: "stacked", Got: "flattened"}); len(d) > 0 {
			o.fail("stacked vs flattened", d...)
		}
	}
	if e, ok := o.errs["stacked"]; ok && len(o.errs) == 1 && strings.Contains(e, "a file of a layer below") {
		// A link to a lower layer's file: one layer's image cannot
		// link into another's (the README says so).
		delete(o.errs, "stacked")
	}
	if len(o.errs) > 0 && len(o.errs) < 3 {
		o.fail("refused by some", o.errList())
	}
	return o
}

// checkAgainstSource is check.Converted of the converted image at conv
// against src, as `ocierofs check` runs it, with the differences it
// reports; that it counts as many as it reports is checked too.
func checkAgainstSource(t *testing.T, conv, src string) ([]string, error) {
	diffs, _, err := runCheck(t, conv, src, 0)
	return diffs, err
}
