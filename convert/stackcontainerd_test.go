package convert_test

// containerd's applier as the oracle of TestStackRandom.
//
// ctrOracle applies each layer of a stack with containerd's own applier
// (pkg/archive.Apply, whiteouts removing what they name, as its native
// snapshotter unpacks) over the tree fstree.Stack makes of the layers
// below, written out to a directory, and compares what it leaves with
// fstree.Stack's tree of the layers up to that one. A difference so stays
// in the layer that makes it: one stack applied whole would carry it, or a
// refusal, into every layer above.
//
// Each difference, in acceptance or in the trees, must be one of the
// documented kinds (ctrKinds, docs/stacking.md "Where the tools differ"):
// a predicate over the layer's entries, the tree below, and containerd's
// trees after each prefix of the layer's entries (where it stood when it
// took or refused one). Any other is unexplained, and fails the seed.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/pkg/archive"
	"github.com/containerd/log"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/erofs"
)

// The kinds of difference between containerd's applier and fstree.Stack
// (which the kernel's mounts of both conversions match), each with why
// the kernel, and so fstree.Stack, differs.
const (
	kindRoot         = "containerd ignores the root entry"
	kindDirTime      = "a directory an entry changes takes the time of the change"
	kindDirTimeEnd   = "a listed directory's time is set at the layer's end, on what its path is then"
	kindDirXattrs    = "a directory listed again keeps the xattrs it had"
	kindLinkMeta     = "a hard link's header sets its inode's mode, owner, time and xattrs"
	kindDevice       = "a character device 0:0 stays a device"
	kindLowerNonDir  = "an entry below a lower layer's non-directory is refused"
	kindSymlink      = "a symlink in an entry's path is followed"
	kindOpaque       = "an opaque marker removes the directories its layer only implied"
	kindLinkWhiteout = "a hard link to the layer's whiteout is refused"
)

// ctrKinds lists the kinds in the order the tally prints them.
var ctrKinds = []string{kindRoot, kindDirTime, kindDirTimeEnd, kindDirXattrs, kindLinkMeta,
	kindDevice, kindLowerNonDir, kindSymlink, kindOpaque, kindLinkWhiteout}

// ctrOutcome is how containerd's applier and fstree.Stack compare on one
// stack.
type ctrOutcome struct {
	layers      int                 // layers both applied or refused, compared
	refused     string              // the layer both refused, if any
	kinds       map[string][]string // explained differences by kind
	unexplained []string
}

func (o *ctrOutcome) explain(kind, line string) {
	if o.kinds == nil {
		o.kinds = map[string][]string{}
	}
	o.kinds[kind] = append(o.kinds[kind], line)
}

// ctrOracle compares containerd's applier with fstree.Stack on layers,
// layer by layer.
func ctrOracle(t testing.TB, layers [][]convtest.Entry) *ctrOutcome {
	log.L.Logger.SetLevel(log.ErrorLevel) // its warnings about ignored entries are expected
	o := &ctrOutcome{}
	contents := map[[32]byte][]byte{}
	for _, es := range layers {
		for _, e := range es {
			contents[sha256.Sum256(e.Data)] = e.Data
		}
	}
	stack := fstree.NewStack(convtest.MTime)
	lower := stack.Tree()
	for li, es := range layers {
		s := &ctrStep{t: t, layer: li + 1, es: es, lower: lower, contents: contents, states: map[int]*ctrState{}}
		for _, e := range es {
			s.ops = append(s.ops, ctrOpOf(e.Hdr))
		}
		full := s.state(len(es))
		s.ctr, s.ctrErr, s.start = full.tree, full.err, full.start
		if _, _, err := stack.Layer(bytes.NewReader(convtest.LayerTar(t, es...))); err != nil {
			s.modelErr = err
		} else {
			s.model = stack.Tree()
		}
		o.layers++
		s.compare(o)
		if s.modelErr != nil {
			if s.ctrErr != nil {
				o.refused = fmt.Sprintf("layer %d: %v; containerd: %v", s.layer, s.modelErr, s.ctrErr)
			}
			break
		}
		lower = s.model
	}
	return o
}

// ctrOp is a tar entry as containerd's applier takes it.
type ctrOp struct {
	hdr  *tar.Header
	name string // the cleaned name; "." for the root
	// kind: 'f' an entry it writes, 'w' a whiteout, 'o' an opaque
	// marker, '-' none (the root's entry)
	kind byte
	at   string // a written entry's path, a whiteout's target, a marker's directory
	link string // a hard link's cleaned target
}

func ctrOpOf(h tar.Header) ctrOp {
	op := ctrOp{hdr: &h, name: cleanName(h.Name), kind: 'f'}
	op.at = op.name
	dir, base := path.Split(op.name)
	dir = cleanName(dir)
	switch {
	case op.name == ".":
		op.kind = '-'
	case base == ".wh..wh..opq":
		op.kind, op.at = 'o', dir
	case strings.HasPrefix(base, ".wh."):
		op.kind, op.at = 'w', path.Join(dir, base[len(".wh."):])
	case h.Typeflag == tar.TypeLink:
		op.link = cleanName(h.Linkname)
	}
	return op
}

// cleanName is a tar name as a relative path, "." for the root.
func cleanName(n string) string {
	if p := strings.TrimPrefix(path.Clean("/"+n), "/"); p != "" {
		return p
	}
	return "."
}

// under reports whether p is q or below it ("." holds every path).
func under(p, q string) bool { return q == "." || p == q || strings.HasPrefix(p, q+"/") }

// parents are p's proper prefixes, from the top: "a", "a/b" for "a/b/c".
func parents(p string) []string {
	var ps []string
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			ps = append(ps, p[:i])
		}
	}
	return ps
}

// ctrState is containerd's tree after a prefix of a layer's entries.
type ctrState struct {
	tree    *fstree.Tree
	err     error
	start   time.Time
	entered int // entries containerd began on
}

// ctrStep is one layer applied by containerd and by fstree.Stack over the
// same tree below.
type ctrStep struct {
	t        testing.TB
	layer    int
	es       []convtest.Entry
	ops      []ctrOp
	lower    *fstree.Tree // fstree.Stack's tree of the layers below
	contents map[[32]byte][]byte
	model    *fstree.Tree
	modelErr error
	ctr      *fstree.Tree // containerd's tree after the layer, refused or not
	ctrErr   error
	start    time.Time
	// endFailed: containerd took every entry, and failed setting the
	// listed directories' times.
	endFailed bool
	states    map[int]*ctrState
	// Lazily, for kindSymlink: the entries containerd takes through a
	// symlink.
	follow    []ctrFollow
	followsOK bool
}

// state is containerd's tree after es[:i], applied over lower.
func (s *ctrStep) state(i int) *ctrState {
	if st := s.states[i]; st != nil {
		return st
	}
	dir, err := os.MkdirTemp("", "ocierofs-ctr-")
	if err != nil {
		s.t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	root := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		s.t.Fatal(err)
	}
	if err := writeTree(root, s.lower, s.contents); err != nil {
		s.t.Fatalf("layer %d: writing the tree below: %v", s.layer, err)
	}
	st := &ctrState{start: time.Now()}
	ctx := log.WithLogger(context.Background(), log.L.WithField("test", "containerd"))
	count := archive.WithFilter(func(*tar.Header) (bool, error) { st.entered++; return true, nil })
	_, st.err = archive.Apply(ctx, root, bytes.NewReader(convtest.LayerTar(s.t, s.es[:i]...)), count)
	if st.err != nil {
		msg := strings.ReplaceAll(strings.ReplaceAll(st.err.Error(), root+"/", ""), root, ".")
		st.err = &ctrError{msg: msg, cause: st.err}
	}
	if st.tree, err = fstree.FromDir(root); err != nil {
		s.t.Fatalf("layer %d: reading containerd's tree: %v", s.layer, err)
	}
	s.states[i] = st
	return st
}

// ctrError is containerd's error with its paths relative to the root.
type ctrError struct {
	msg   string
	cause error
}

func (e *ctrError) Error() string { return e.msg }
func (e *ctrError) Unwrap() error { return e.cause }

// writeTree writes tr, a tree of fstree.Stack, into the directory root:
// its hard links as links, its owners, modes, xattrs and times.
func writeTree(root string, tr *fstree.Tree, contents map[[32]byte][]byte) error {
	first := map[string]string{} // a link's first path
	for _, g := range tr.LinkGroups() {
		for _, p := range g[1:] {
			first[p] = g[0]
		}
	}
	meta := func(full string, n *fstree.Node) error {
		if err := os.Lchown(full, int(n.Uid), int(n.Gid)); err != nil {
			return err
		}
		if n.Type() != erofs.S_IFLNK {
			if err := unix.Chmod(full, n.Perm()); err != nil { // after chown, which clears setuid
				return err
			}
		}
		for k, v := range n.Xattrs {
			if err := unix.Lsetxattr(full, k, []byte(v), 0); err != nil {
				return fmt.Errorf("xattr %s: %w", k, err)
			}
		}
		ts := unix.NsecToTimespec(n.Mtime.UnixNano())
		return unix.UtimesNanoAt(unix.AT_FDCWD, full, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	}
	var dirs []string
	for _, p := range tr.Paths() {
		n, full := tr.Node(p), filepath.Join(root, p)
		if n.IsDir() {
			dirs = append(dirs, p)
			if p != "." {
				if err := os.Mkdir(full, 0o700); err != nil {
					return err
				}
			}
			continue
		}
		if f, ok := first[p]; ok {
			if err := os.Link(filepath.Join(root, f), full); err != nil {
				return err
			}
			continue
		}
		var err error
		switch n.Type() {
		case erofs.S_IFREG:
			data, ok := contents[n.Digest]
			if !ok {
				return fmt.Errorf("%s: no entry has its content", p)
			}
			err = os.WriteFile(full, data, 0o600)
		case erofs.S_IFLNK:
			err = os.Symlink(n.Target, full)
		case erofs.S_IFIFO:
			err = unix.Mkfifo(full, 0o600)
		case erofs.S_IFCHR, erofs.S_IFBLK:
			err = unix.Mknod(full, n.Type()|0o600, int(unix.Mkdev(n.Devmajor, n.Devminor)))
		default:
			err = fmt.Errorf("type %#o", n.Type())
		}
		if err == nil {
			err = meta(full, n)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- { // children first: their times stay
		if err := meta(filepath.Join(root, dirs[i]), tr.Node(dirs[i])); err != nil {
			return fmt.Errorf("%s: %w", dirs[i], err)
		}
	}
	return nil
}

// compare records the layer's differences in o, each explained by its
// kind or not.
func (s *ctrStep) compare(o *ctrOutcome) {
	prefix := fmt.Sprintf("layer %d: ", s.layer)
	switch {
	case s.ctrErr != nil && s.modelErr != nil:
	case s.ctrErr != nil:
		line := prefix + "refused by containerd only: " + s.ctrErr.Error()
		k := s.ctrRefusal()
		if k == "" {
			o.unexplained = append(o.unexplained, line+s.context())
			break
		}
		o.explain(k, line)
		if s.failing() == len(s.es) {
			// It took every entry: the trees compare, but for the
			// times of the directories it did not get to.
			s.endFailed = true
			s.compareTrees(o, prefix)
		}
	case s.modelErr != nil:
		line := prefix + "refused by fstree.Stack only: " + s.modelErr.Error()
		if k := s.modelRefusal(); k != "" {
			o.explain(k, line)
		} else {
			o.unexplained = append(o.unexplained, line+s.context())
		}
	default:
		s.compareTrees(o, prefix)
	}
}

// compareTrees records the differences of the trees after the layer.
func (s *ctrStep) compareTrees(o *ctrOutcome, prefix string) {
	explained := map[string]string{} // path and field → kind
	d := fstree.Diff(s.model, s.ctr, fstree.DiffOptions{Want: "stack", Got: "containerd", IgnoreImpliedMtime: true,
		Ignore: func(p, field string) bool {
			if field == "links" {
				return false // below, with all of the group's paths
			}
			k := s.treeKind(p, field)
			if k != "" {
				explained[p+" "+field] = k
			}
			return k != ""
		}})
	for _, pf := range sortedKeys(explained) {
		o.explain(explained[pf], prefix+pf)
	}
	var rest []string
	for _, l := range d {
		if ps, ok := linkLinePaths(l); ok {
			if k := s.linksKind(ps); k != "" {
				o.explain(k, prefix+l)
				continue
			}
		}
		rest = append(rest, prefix+l)
	}
	if len(rest) > 0 {
		rest[len(rest)-1] += s.context()
	}
	o.unexplained = append(o.unexplained, rest...)
}

// context is the layer and the tree below, for an unexplained difference.
func (s *ctrStep) context() string {
	var b strings.Builder
	b.WriteString("\n      layer:")
	for _, e := range s.es {
		b.WriteString(" " + entryCode(e))
	}
	b.WriteString("\n      below:")
	for _, p := range s.lower.Paths() {
		n := s.lower.Node(p)
		fmt.Fprintf(&b, " %s(%o)", p, n.Mode)
	}
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// linkLinePaths are the paths of a Diff line about hard links.
func linkLinePaths(l string) ([]string, bool) {
	rest, ok := strings.CutPrefix(l, "hard links: ")
	if !ok {
		return nil, false
	}
	var ps []string
	for _, f := range strings.Fields(strings.NewReplacer("[", " ", "]", " ", ",", " ").Replace(rest)) {
		if f != "stack" && f != "containerd" && f != "!=" {
			ps = append(ps, f)
		}
	}
	return ps, true
}

// ---------------------------------------------------------------------------
// The kinds.

var modelEntryRe = regexp.MustCompile(`entry ("(?:[^"\\]|\\.)*")`)

// modelRefusal is the kind of a layer fstree.Stack refuses and containerd
// takes, or "".
func (s *ctrStep) modelRefusal() string {
	m := modelEntryRe.FindStringSubmatch(s.modelErr.Error())
	if m == nil {
		return ""
	}
	name, err := strconv.Unquote(m[1])
	if err != nil {
		return ""
	}
	for i, op := range s.ops {
		if op.name == cleanName(name) && s.throughSymlink(i) {
			return kindSymlink
		}
	}
	return ""
}

// ctrRefusal is the kind of a layer containerd refuses and fstree.Stack
// takes, or "".
func (s *ctrStep) ctrRefusal() string {
	i := s.failing()
	if i == len(s.es) {
		// After the entries: setting the listed directories' times,
		// where its path now holds nothing, or a symlink.
		for _, op := range s.ops {
			if op.hdr.Typeflag == tar.TypeDir && op.kind == 'f' {
				if n := s.ctr.Node(op.at); n == nil || n.Type() == erofs.S_IFLNK {
					return kindDirTimeEnd
				}
			}
		}
		return ""
	}
	op, st := s.ops[i], s.state(i).tree
	if s.throughSymlink(i) {
		return kindSymlink
	}
	err := s.state(i + 1).err
	switch {
	case errors.Is(err, syscall.ENOTDIR):
		q, n := blocked(st, op.name)
		switch {
		case n == nil:
		case s.putDevice(q, n):
			return kindDevice
		case s.lower.Node(q) != nil && !s.lower.Node(q).IsDir() && s.untouched(q, i):
			return kindLowerNonDir
		}
	case errors.Is(err, syscall.ENOENT) && op.link != "":
		if s.whitedOut(op.link, i) {
			return kindLinkWhiteout
		}
		if len(s.markerRemoved(op.link, i)) > 0 {
			return kindOpaque
		}
	}
	return ""
}

// failing is the index of the entry containerd refuses, or len(es) where
// it refuses the layer after its entries (setting directories' times).
func (s *ctrStep) failing() int {
	st := s.state(len(s.es))
	if st.entered < len(s.es) || !s.endError(st.err) {
		return st.entered - 1
	}
	return len(s.es)
}

// endError reports an error of the work containerd does after a layer's
// entries: setting the listed directories' times, through their paths
// (errors of resolving a path are unwrapped there, and wrapped, "failed
// to get root path", for an entry).
func (s *ctrStep) endError(err error) bool {
	m := err.Error()
	return strings.HasPrefix(m, "failed call to UtimesNanoAt") || strings.HasPrefix(m, "lstat ") || m == "too many links"
}

// blocked is the first of p's parents that is not a directory in tr (a
// symlink, a file), with its node; "" and nil if there is none.
func blocked(tr *fstree.Tree, p string) (string, *fstree.Node) {
	for _, q := range parents(p) {
		n := tr.Node(q)
		if n == nil {
			return "", nil // made as a directory
		}
		if !n.IsDir() {
			return q, n
		}
	}
	return "", nil
}

// followsSymlink reports whether containerd, at entry i, resolves a
// symlink in the entry's path, or in its hard link's target's.
func (s *ctrStep) followsSymlink(i int) bool {
	if s.ops[i].kind == '-' || !s.symlinks() {
		return false
	}
	op, st := s.ops[i], s.state(i).tree
	if _, n := blocked(st, op.name); n != nil && n.Type() == erofs.S_IFLNK {
		return true
	}
	_, n := blocked(st, op.link)
	return op.link != "" && n != nil && n.Type() == erofs.S_IFLNK
}

// symlinks reports whether the tree below or the layer has a symlink,
// without which containerd follows none (and the trees after each entry
// need not be made).
func (s *ctrStep) symlinks() bool {
	for _, op := range s.ops {
		if op.hdr.Typeflag == tar.TypeSymlink {
			return true
		}
	}
	for _, p := range s.lower.Paths() {
		if s.lower.Node(p).Type() == erofs.S_IFLNK {
			return true
		}
	}
	return false
}

// throughSymlink reports whether containerd takes entry i through a
// symlink, or where it took an entry before through one: the entry's
// path, its hard link's target, or the first non-directory above it, is
// in that entry's region.
func (s *ctrStep) throughSymlink(i int) bool {
	if s.followsSymlink(i) {
		return true
	}
	op := s.ops[i]
	q, _ := blocked(s.state(i).tree, op.name)
	for _, p := range []string{op.at, op.link, q} {
		if p != "" && s.inSymlinkRegion(p, i) {
			return true
		}
	}
	return false
}

// untouched reports whether no entry of the layer before i is at q, nor
// a whiteout of it: what stands at q is the lower layers' (an entry that
// removes a directory above q removes q).
func (s *ctrStep) untouched(q string, i int) bool {
	for _, op := range s.ops[:i] {
		if op.kind != '-' && op.kind != 'o' && op.at == q {
			return false
		}
	}
	return true
}

// whitedOut reports whether the last entry of the layer before i at p is
// a whiteout of p (a hard link to which fstree.Stack takes for one).
func (s *ctrStep) whitedOut(p string, i int) bool {
	for j := i - 1; j >= 0; j-- {
		if op := s.ops[j]; op.at == p && op.kind != 'o' {
			return op.kind == 'w'
		}
	}
	return false
}

// markerRemoved are the indexes of the opaque markers of the layer before
// entry i that removed, in containerd, a directory at or above p that the
// layer had only implied (made for an entry below it, or kept from below):
// a directory strictly below the marker's, at or above p, that containerd
// had before the marker and not after, and that no entry before the marker
// names.
func (s *ctrStep) markerRemoved(p string, i int) []int {
	var ms []int
	for m, op := range s.ops[:i] {
		if op.kind != 'o' || !under(p, op.at) || p == op.at {
			continue
		}
		for _, a := range append(parents(p), p) {
			if a == op.at || !under(a, op.at) {
				continue
			}
			if n := s.state(m).tree.Node(a); n == nil || !n.IsDir() || s.state(m+1).tree.Node(a) != nil {
				continue
			}
			named := false
			for _, o := range s.ops[:m] {
				named = named || o.kind == 'f' && o.name == a
			}
			if !named {
				ms = append(ms, m)
				break
			}
		}
	}
	return ms
}

// ownBefore reports whether an entry of the layer before entry m acts at
// or below p: p is the layer's own entry, or a directory it implied.
func (s *ctrStep) ownBefore(p string, m int) bool {
	for _, o := range s.ops[:m] {
		if o.kind != '-' && under(o.at, p) {
			return true
		}
	}
	return false
}

// treeKind is the kind of a difference in field at p of trees both took,
// or "".
func (s *ctrStep) treeKind(p, field string) string {
	c, m := s.ctr.Node(p), s.model.Node(p)
	switch {
	case s.inSymlinkRegion(p, len(s.es)+1):
		return kindSymlink
	case field == "extra":
		if s.putDevice(p, c) {
			return kindDevice
		}
		return ""
	case field == "missing":
		// The layer's own entry, or a directory it implied, gone with
		// a directory above it that an opaque marker removed.
		for _, m := range s.markerRemoved(p, len(s.ops)) {
			if s.ownBefore(p, m) {
				return kindOpaque
			}
		}
		return ""
	case c == nil || m == nil:
		return ""
	}
	if p == "." && s.rootListed() && ctrField(s.lower.Node("."), field) == ctrField(c, field) {
		return kindRoot
	}
	// The kernel stamps with a clock a tick behind time.Now; the trees
	// below have the tars' times, years before.
	if field == "mtime" && c.IsDir() && c.Mtime.After(s.start.Add(-time.Second)) && s.changesDir(p) {
		return kindDirTime
	}
	if !c.IsDir() && s.linkHeaderSets(p, field) {
		return kindLinkMeta
	}
	if field == "mtime" && s.dirTimeAtEnd(p) {
		return kindDirTimeEnd
	}
	if field == "mtime" && s.endFailed && c.IsDir() && s.listedDir(p, "") {
		// containerd did not get to set the time of the directory's
		// last entry: it has an earlier entry's, or the time of its
		// making or change, or the time it had below.
		if s.listedDir(p, ctrField(c, "mtime")) || c.Mtime.After(s.start.Add(-time.Second)) || s.lower.Node(p) != nil && c.Mtime.Equal(s.lower.Node(p).Mtime) {
			return kindDirTimeEnd
		}
	}
	if k, ok := strings.CutPrefix(field, "xattr:"); ok && c.IsDir() && m.IsDir() {
		if _, has := m.Xattrs[k]; !has && s.dirHadXattr(p, k, c.Xattrs[k]) {
			return kindDirXattrs
		}
	}
	if c.IsDir() && field != "mtime" && c.Perm() == 0o755 && c.Uid == 0 && c.Gid == 0 && len(c.Xattrs) == 0 {
		// The layer's directory, made again, as an implied one, after
		// the marker removed it.
		for _, m := range s.markerRemoved(p, len(s.ops)) {
			if s.ownBefore(p, m) {
				return kindOpaque
			}
		}
	}
	return ""
}

// putDevice reports whether n, containerd's node at p, is a character
// device 0:0 that an entry of the layer put there (as a device, or a hard
// link to one).
func (s *ctrStep) putDevice(p string, n *fstree.Node) bool {
	if n.Type() != erofs.S_IFCHR || n.Devmajor != 0 || n.Devminor != 0 {
		return false
	}
	for _, op := range s.ops {
		if op.kind == 'f' && op.at == p && (op.hdr.Typeflag == tar.TypeChar || op.hdr.Typeflag == tar.TypeLink) {
			return true
		}
	}
	return false
}

// linksKind is the kind of a difference in how the paths ps are linked,
// or "".
func (s *ctrStep) linksKind(ps []string) string {
	for _, p := range ps {
		if s.inSymlinkRegion(p, len(s.es)+1) {
			return kindSymlink
		}
	}
	return ""
}

// ctrField is a node's field as Diff names it, printed.
func ctrField(n *fstree.Node, field string) string {
	switch field {
	case "mode":
		return fmt.Sprintf("%o", n.Perm())
	case "uid":
		return fmt.Sprint(n.Uid)
	case "gid":
		return fmt.Sprint(n.Gid)
	case "mtime":
		return n.Mtime.UTC().Format(time.RFC3339Nano)
	}
	if k, ok := strings.CutPrefix(field, "xattr:"); ok {
		v, has := n.Xattrs[k]
		return fmt.Sprint(has, v)
	}
	return "?" + field
}

// hdrField is what a tar header gives field, printed as ctrField prints
// it.
func hdrField(h *tar.Header, field string) string {
	switch field {
	case "mode":
		return fmt.Sprintf("%o", h.Mode&0o7777)
	case "uid":
		return fmt.Sprint(h.Uid)
	case "gid":
		return fmt.Sprint(h.Gid)
	case "mtime":
		tm := h.ModTime
		if tm.IsZero() {
			tm = convtest.MTime
		}
		return tm.UTC().Format(time.RFC3339Nano)
	}
	if k, ok := strings.CutPrefix(field, "xattr:"); ok {
		v, has := h.PAXRecords["SCHILY.xattr."+k]
		return fmt.Sprint(has, v)
	}
	return "!" + field
}

// listedDir reports whether the layer has a directory entry for p, of
// mtime (printed as ctrField prints it) unless that is "".
func (s *ctrStep) listedDir(p, mtime string) bool {
	for _, op := range s.ops {
		if op.kind == 'f' && op.hdr.Typeflag == tar.TypeDir && op.at == p && (mtime == "" || hdrField(op.hdr, "mtime") == mtime) {
			return true
		}
	}
	return false
}

// rootListed reports whether the layer has an entry for the root.
func (s *ctrStep) rootListed() bool {
	for _, op := range s.ops {
		if op.kind == '-' {
			return true
		}
	}
	return false
}

// changesDir reports whether an entry of the layer is at or below a child
// of p, or containerd took one to a child of p through a symlink: adding,
// replacing or removing it changes p.
func (s *ctrStep) changesDir(p string) bool {
	for _, op := range s.ops {
		if op.kind != '-' && op.name != p && under(op.name, p) {
			return true
		}
	}
	for _, f := range s.follows() {
		for _, q := range f.changed {
			if q != p && under(q, p) {
				return true
			}
		}
	}
	return false
}

// linkHeaderSets reports whether a hard link header of the layer gives
// p's inode containerd's field: a link header of the layer at or to a
// path of the inode's (after the layer, or below it), or linked to one
// through the layer's other link headers.
func (s *ctrStep) linkHeaderSets(p, field string) bool {
	set := inode(p, s.ctr, s.lower)
	var hs []*tar.Header
	for grew := true; grew; {
		grew = false
		hs = hs[:0]
		for _, op := range s.ops {
			if op.link == "" || !set[op.at] && !set[op.link] {
				continue
			}
			hs = append(hs, op.hdr)
			if !set[op.at] || !set[op.link] {
				set[op.at], set[op.link], grew = true, true, true
			}
		}
	}
	want := ctrField(s.ctr.Node(p), field)
	if strings.HasPrefix(field, "xattr:") && !strings.HasPrefix(want, "true") {
		return false // it sets the header's xattrs, and leaves the others
	}
	for _, h := range hs {
		if hdrField(h, field) == want {
			return true
		}
	}
	return false
}

// dirTimeAtEnd reports whether containerd's mtime of p is that of a
// directory entry of the layer at p, set when the layer ends on what then
// stands there: a non-directory at p, a hard link of it, or the path a
// symlink at the directory's path names.
func (s *ctrStep) dirTimeAtEnd(p string) bool {
	c := s.ctr.Node(p)
	want := ctrField(c, "mtime")
	group := inode(p, s.ctr)
	for _, op := range s.ops {
		if op.kind != 'f' || op.hdr.Typeflag != tar.TypeDir || hdrField(op.hdr, "mtime") != want {
			continue
		}
		q := s.ctr.Node(op.at)
		switch {
		case q == nil:
		case group[op.at] && !c.IsDir():
			return true
		case q.Type() == erofs.S_IFLNK:
			t := q.Target
			if !path.IsAbs(t) {
				t = path.Join("/", path.Dir(op.at), t)
			}
			if cleanName(t) == p {
				return true
			}
		}
	}
	return false
}

// inode is the set of p and the paths that are hard links of it in any of
// trees.
func inode(p string, trees ...*fstree.Tree) map[string]bool {
	set := map[string]bool{p: true}
	for _, tr := range trees {
		for _, g := range tr.LinkGroups() {
			if slices.Contains(g, p) {
				for _, q := range g {
					set[q] = true
				}
			}
		}
	}
	return set
}

// dirHadXattr reports whether the directory p had the xattr k=v below
// the layer, or in an earlier entry of the layer for it.
func (s *ctrStep) dirHadXattr(p, k, v string) bool {
	if n := s.lower.Node(p); n != nil && n.IsDir() {
		if w, ok := n.Xattrs[k]; ok && w == v {
			return true
		}
	}
	for _, op := range s.ops {
		if op.kind == 'f' && op.at == p && op.hdr.Typeflag == tar.TypeDir && hdrField(op.hdr, "xattr:"+k) == fmt.Sprint(true, v) {
			return true
		}
	}
	return false
}

// follows are the entries containerd takes through a symlink, with where
// they reach, once.
func (s *ctrStep) follows() []ctrFollow {
	if s.followsOK {
		return s.follow
	}
	s.followsOK = true
	for i, op := range s.ops {
		if !s.followsSymlink(i) {
			continue
		}
		f := ctrFollow{i: i, at: []string{op.at}}
		for _, p := range []string{op.name, op.link} {
			if q, n := blocked(s.state(i).tree, p); n != nil && n.Type() == erofs.S_IFLNK {
				f.at = append(f.at, q)
			}
		}
		if i < len(s.es) && s.state(i+1).entered == i+1 {
			f.changed = changedPaths(s.state(i).tree, s.state(i+1).tree)
		}
		s.follow = append(s.follow, f)
	}
	return s.follow
}

// ctrFollow is an entry containerd takes through a symlink.
type ctrFollow struct {
	i int
	// at: the entry's path and the symlink's, where fstree.Stack puts the
	// entry (the symlink gives way to a directory); changed: the paths
	// containerd changed in taking it.
	at, changed []string
}

// inSymlinkRegion reports whether p is at or below where a symlink
// containerd followed takes an entry of the layer before entry i (any, for
// len(es)), in either tree.
func (s *ctrStep) inSymlinkRegion(p string, i int) bool {
	for _, f := range s.follows() {
		if f.i >= i {
			break
		}
		for _, qs := range [][]string{f.at, f.changed} {
			for _, q := range qs {
				if under(p, q) && q != "." {
					return true
				}
			}
		}
	}
	return false
}

// changedPaths are the paths whose node differs between a and b, but for
// the times of directories (an entry changes its parents').
func changedPaths(a, b *fstree.Tree) []string {
	var ps []string
	for _, l := range fstree.Diff(a, b, fstree.DiffOptions{Ignore: func(p, field string) bool {
		switch n := a.Node(p); {
		case field == "links":
			return false // below, with all of the group's paths
		case field == "mtime" && n != nil && n.IsDir():
			return true
		}
		ps = append(ps, p)
		return true
	}}) {
		if lp, ok := linkLinePaths(l); ok {
			ps = append(ps, lp...)
		}
	}
	return ps
}

// ---------------------------------------------------------------------------
// The tally over seeds.

// oracleTally counts, over seeds, how containerd's applier and
// fstree.Stack differ: the seeds that show each kind, with a sample, and
// the seeds with an unexplained difference.
type oracleTally struct {
	seeds, layers, refusedBoth, unexplained int
	// kinds: the seeds that show each kind; diffs, its differences.
	kinds, diffs map[string]int
	samples      map[string]string
}

func (o *oracleTally) add(seed uint64, c *ctrOutcome) {
	if o.kinds == nil {
		o.kinds, o.diffs, o.samples = map[string]int{}, map[string]int{}, map[string]string{}
	}
	o.seeds++
	o.layers += c.layers
	if c.refused != "" {
		o.refusedBoth++
	}
	if len(c.unexplained) > 0 {
		o.unexplained++
	}
	for k, ls := range c.kinds {
		o.kinds[k]++
		o.diffs[k] += len(ls)
		if _, ok := o.samples[k]; !ok {
			o.samples[k] = fmt.Sprintf("seed %d, %s", seed, ls[0])
		}
	}
}

func (o *oracleTally) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "containerd's applier vs fstree.Stack, layer by layer: %d stacks, %d layers compared, %d stacks refused by both, %d stacks with an unexplained difference; seeds and differences of each kind:",
		o.seeds, o.layers, o.refusedBoth, o.unexplained)
	for _, k := range ctrKinds {
		fmt.Fprintf(&b, "\n  %5d %6d  %s", o.kinds[k], o.diffs[k], k)
		if s, ok := o.samples[k]; ok {
			fmt.Fprintf(&b, "  (%s)", s)
		}
	}
	return b.String()
}

// TestStackRandomContainerd is TestStackRandom's comparison with
// containerd's applier alone, without converting: quicker, for many seeds
// (STACK_RANDOM_SEEDS, as TestStackRandom takes it, and needed: for the
// default seeds, TestStackRandom compares). It needs root.
func TestStackRandomContainerd(t *testing.T) {
	seeds := os.Getenv("STACK_RANDOM_SEEDS")
	switch {
	case seeds == "":
		t.Skip("STACK_RANDOM_SEEDS is not set (TestStackRandom compares its default seeds)")
	case os.Geteuid() != 0:
		t.Skip("containerd's applier needs root (owners, devices)")
	}
	lo, hi := stackRandomSeeds(t, seeds)
	var tally oracleTally
	for seed := lo; seed <= hi; seed++ {
		layers := randomStack(seed)
		o := ctrOracle(t, layers)
		tally.add(seed, o)
		if len(o.unexplained) > 0 {
			t.Errorf("seed %d: containerd vs fstree.Stack, unexplained:\n    %s\n%s", seed, strings.Join(o.unexplained, "\n    "), stackCode(fmt.Sprintf("seed %d", seed), layers))
		}
	}
	t.Log(tally.String())
}
