//go:build linux

package fstree

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/erofs"
	"golang.org/x/sys/unix"
)

const (
	testUid = 100000
	testGid = 70000
)

// requireRoot skips the test unless it runs as root, and under -short: the
// fast tier runs as it would for any user.
func requireRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: needs root (chown, mknod, trusted.* xattrs, mounts); make test runs it")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root (chown, mknod, trusted.* xattrs)")
	}
}

func requireGNUTar(t *testing.T) {
	t.Helper()
	out, err := exec.Command("tar", "--version").Output()
	if err != nil || !bytes.Contains(out, []byte("GNU tar")) {
		t.Skip("needs GNU tar")
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// fsb builds a source tree under root with the calls a test needs.
type fsb struct {
	t    *testing.T
	root string
}

func (b fsb) p(name string) string { return filepath.Join(b.root, name) }

func (b fsb) file(name, content string, perm uint32) {
	b.t.Helper()
	check(b.t, os.WriteFile(b.p(name), []byte(content), 0o600))
	check(b.t, unix.Chmod(b.p(name), perm))
}

func (b fsb) dir(name string, perm uint32) {
	b.t.Helper()
	check(b.t, os.Mkdir(b.p(name), 0o700))
	check(b.t, unix.Chmod(b.p(name), perm))
}

func (b fsb) mknod(name string, mode uint32, major, minor uint32) {
	b.t.Helper()
	check(b.t, unix.Mknod(b.p(name), mode, int(unix.Mkdev(major, minor))))
	check(b.t, unix.Chmod(b.p(name), mode&permMask))
}

func (b fsb) own(name string, uid, gid int) {
	b.t.Helper()
	check(b.t, os.Lchown(b.p(name), uid, gid))
}

func (b fsb) xattr(name, key, value string) {
	b.t.Helper()
	check(b.t, unix.Lsetxattr(b.p(name), key, []byte(value), 0))
}

func (b fsb) mtime(name string, tm time.Time) {
	b.t.Helper()
	ts := unix.NsecToTimespec(tm.UnixNano())
	check(b.t, unix.UtimesNanoAt(unix.AT_FDCWD, b.p(name), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW))
}

// restore gives name the perm bits, owner and mtime of n.
func (b fsb) restore(name string, n *Node) {
	b.t.Helper()
	if n.Type() != erofs.S_IFLNK {
		check(b.t, unix.Chmod(b.p(name), n.Perm()))
	}
	b.own(name, int(n.Uid), int(n.Gid))
	b.mtime(name, n.Mtime)
}

// capV2 is a security.capability value (VFS_CAP_REVISION_2) granting
// CAP_NET_BIND_SERVICE: binary, with NUL bytes.
func capV2() string {
	var b [20]byte
	binary.LittleEndian.PutUint32(b[0:], 0x02000000)
	binary.LittleEndian.PutUint32(b[4:], 1<<10)
	return string(b[:])
}

var t0 = time.Date(2021, 3, 4, 5, 6, 7, 0, time.UTC)

// at returns t0 plus i seconds and a nanosecond part that differs per i.
func at(i int) time.Time {
	return t0.Add(time.Duration(i)*time.Second + time.Duration(100000000+i*1111))
}

// makeSource lays out a tree with every file type, owners, xattrs, hard
// links and nanosecond mtimes. The files under m/ are for TestDiffDir.
func makeSource(t *testing.T) (string, fsb) {
	requireRoot(t)
	b := fsb{t, t.TempDir()}
	big := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16+7) // several hash buffers

	b.file("f", "hello\n", 0o644)
	b.own("f", testUid, testGid)
	b.xattr("f", "user.a", "1")
	b.xattr("f", "trusted.t", "\x00\x01bin")
	check(t, os.WriteFile(b.p("big"), big, 0o600))
	check(t, unix.Chmod(b.p("big"), 0o4755))
	if err := unix.Lsetxattr(b.p("big"), "security.capability", []byte(capV2()), 0); err != nil {
		t.Fatalf("security.capability: %v", err)
	}
	b.dir("dir", 0o750)
	b.dir("dir/sub", 0o1777)
	b.file("dir/sub/g", "", 0o600)
	check(t, os.Link(b.p("f"), b.p("dir/f2")))
	check(t, os.Link(b.p("big"), b.p("dir/sub/big2")))
	check(t, os.Symlink("f", b.p("ln")))
	b.own("ln", testUid, testGid)
	b.xattr("ln", "trusted.s", "sym")
	check(t, unix.Mkfifo(b.p("fifo"), 0o640))
	check(t, unix.Chmod(b.p("fifo"), 0o640))
	b.mknod("chr", unix.S_IFCHR|0o666, 1, 3)
	b.mknod("blk", unix.S_IFBLK|0o660, 8, 17)
	b.own("blk", 0, 6)
	b.dir("empty", 0o2755)
	b.xattr("empty", "user.d", "")

	b.dir("m", 0o755)
	for _, n := range []string{"chmod", "chown", "touch", "content", "size", "remove", "xattr", "link1", "type"} {
		b.file("m/"+n, "data\n", 0o644)
		b.own("m/"+n, testUid, testGid)
	}
	b.xattr("m/xattr", "user.x", "1")
	b.xattr("m/xattr", "user.gone", "g")
	check(t, os.Link(b.p("m/link1"), b.p("m/link2")))
	check(t, os.Symlink("a", b.p("m/sym")))
	b.mknod("m/dev", unix.S_IFCHR|0o600, 1, 3)

	// mtimes last, children before parents.
	var paths []string
	check(t, filepath.Walk(b.root, func(p string, _ os.FileInfo, err error) error {
		paths = append(paths, p)
		return err
	}))
	for i := len(paths) - 1; i >= 0; i-- {
		rel, _ := filepath.Rel(b.root, paths[i])
		b.mtime(rel, at(i))
	}
	return b.root, b
}

func sum(s string) [32]byte { return sha256.Sum256([]byte(s)) }

func TestFromDir(t *testing.T) {
	dir, b := makeSource(t)
	tr, err := FromDir(dir)
	check(t, err)

	mt := func(name string) time.Time {
		var st unix.Stat_t
		check(t, unix.Lstat(b.p(name), &st))
		return time.Unix(int64(st.Mtim.Sec), int64(st.Mtim.Nsec))
	}
	big, _ := os.ReadFile(b.p("big"))
	want := []Node{
		{Path: "f", Mode: erofs.S_IFREG | 0o644, Uid: testUid, Gid: testGid, Size: 6, Digest: sum("hello\n"),
			Xattrs: map[string]string{"user.a": "1", "trusted.t": "\x00\x01bin"}},
		{Path: "dir/f2", Mode: erofs.S_IFREG | 0o644, Uid: testUid, Gid: testGid, Size: 6, Digest: sum("hello\n"),
			Xattrs: map[string]string{"user.a": "1", "trusted.t": "\x00\x01bin"}},
		{Path: "big", Mode: erofs.S_IFREG | 0o4755, Size: int64(len(big)), Digest: sha256.Sum256(big),
			Xattrs: map[string]string{"security.capability": capV2()}},
		{Path: "dir", Mode: erofs.S_IFDIR | 0o750},
		{Path: "dir/sub", Mode: erofs.S_IFDIR | 0o1777},
		{Path: "dir/sub/g", Mode: erofs.S_IFREG | 0o600, Digest: sum("")},
		{Path: "ln", Mode: erofs.S_IFLNK | 0o777, Uid: testUid, Gid: testGid, Target: "f",
			Xattrs: map[string]string{"trusted.s": "sym"}},
		{Path: "fifo", Mode: erofs.S_IFIFO | 0o640},
		{Path: "chr", Mode: erofs.S_IFCHR | 0o666, Devmajor: 1, Devminor: 3},
		{Path: "blk", Mode: erofs.S_IFBLK | 0o660, Gid: 6, Devmajor: 8, Devminor: 17},
		{Path: "empty", Mode: erofs.S_IFDIR | 0o2755, Xattrs: map[string]string{"user.d": ""}},
	}
	for _, w := range want {
		g := tr.Node(w.Path)
		if g == nil {
			t.Errorf("%s: missing", w.Path)
			continue
		}
		w.Mtime = mt(w.Path)
		if w.Mtime.Nanosecond() == 0 {
			t.Errorf("%s: test set no nanoseconds", w.Path)
		}
		got := *g
		got.link = 0
		if len(got.Xattrs) == 0 {
			got.Xattrs = nil
		}
		if !got.Mtime.Equal(w.Mtime) {
			t.Errorf("%s: mtime %v, want %v", w.Path, got.Mtime, w.Mtime)
		}
		got.Mtime = w.Mtime
		if !reflect.DeepEqual(got, w) {
			t.Errorf("%s:\n got %+v\nwant %+v", w.Path, got, w)
		}
	}
	if n := tr.Node("."); n == nil || !n.IsDir() {
		t.Errorf("root: %+v", n)
	}
	// Each group in Paths order, groups by their first path.
	wantGroups := [][]string{{"big", "dir/sub/big2"}, {"dir/f2", "f"}, {"m/link1", "m/link2"}}
	if g := tr.LinkGroups(); !reflect.DeepEqual(g, wantGroups) {
		t.Errorf("LinkGroups = %v, want %v", g, wantGroups)
	}
	ps := tr.Paths()
	if ps[0] != "." || ps[1] != "big" || len(ps) != tr.Len() {
		t.Errorf("Paths = %v", ps)
	}
	if d := Diff(tr, tr, DiffOptions{}); len(d) != 0 {
		t.Errorf("Diff(t, t) = %q", d)
	}
}

func TestFromDirSocket(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, "sock"))
	if err != nil {
		t.Skipf("unix socket: %v", err)
	}
	defer l.Close()
	tr, err := FromDir(dir)
	check(t, err)
	if n := tr.Node("sock"); n == nil || n.Type() != erofs.S_IFSOCK {
		t.Fatalf("sock: %+v", n)
	}
}

var harnessTarFlags = []string{"--xattrs", "--xattrs-include=*", "--numeric-owner", "--format=pax"}

// gnuTar archives dir with GNU tar, by default the way the round-trip
// harness does.
func gnuTar(t *testing.T, dir string, flags ...string) string {
	requireGNUTar(t)
	if flags == nil {
		flags = harnessTarFlags
	}
	out := filepath.Join(t.TempDir(), "x.tar")
	run(t, "tar", append(flags, "-cf", out, "-C", dir, ".")...)
	return out
}

func fromTarFile(t *testing.T, name string, opt TarOptions) *Tree {
	t.Helper()
	f, err := os.Open(name)
	check(t, err)
	defer f.Close()
	tr, err := FromTar(f, opt)
	check(t, err)
	return tr
}

func TestFromTarMatchesFromDir(t *testing.T) {
	dir, _ := makeSource(t)
	src, err := FromDir(dir)
	check(t, err)
	x := gnuTar(t, dir)
	// No DiffOptions: GNU tar records "./" itself (so the root is not
	// implied and has the temp dir's metadata), PAX keeps nanosecond
	// mtimes, and the source has no .wh. names, so overlay mode changes
	// nothing.
	tr := fromTarFile(t, x, TarOptions{})
	if d := Diff(src, tr, DiffOptions{}); len(d) != 0 {
		t.Errorf("FromDir vs FromTar:\n%s", strings.Join(d, "\n"))
	}
	if tr.Node(".").Implied {
		t.Errorf("root implied")
	}
}

func TestFromTarSparse(t *testing.T) {
	requireRoot(t)
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "sparse"))
	check(t, err)
	_, err = f.WriteAt([]byte("tail"), 3<<20)
	check(t, err)
	_, err = f.WriteAt([]byte("head"), 0)
	check(t, err)
	check(t, f.Close())
	src, err := FromDir(dir)
	check(t, err)
	for _, format := range []string{"--format=pax", "--format=gnu"} {
		x := gnuTar(t, dir, "--sparse", "--numeric-owner", format)
		tr := fromTarFile(t, x, TarOptions{})
		if n := tr.Node("sparse"); n == nil || n.Size != 3<<20+4 {
			t.Errorf("%s: sparse: %+v", format, n)
		}
		// The GNU format keeps whole seconds only.
		if d := Diff(src, tr, DiffOptions{MtimeGranularity: time.Second}); len(d) != 0 {
			t.Errorf("%s:\n%s", format, strings.Join(d, "\n"))
		}
	}
}

// TestDiffDir extracts the source with GNU tar as the harness does, checks
// that the copy equals the source, then mutates the copy one way per path
// and expects exactly one line per mutation.
func TestDiffDir(t *testing.T) {
	dir, _ := makeSource(t)
	src, err := FromDir(dir)
	check(t, err)
	x := gnuTar(t, dir)
	e := fsb{t, t.TempDir()}
	run(t, "tar", "--xattrs", "--xattrs-include=*", "--numeric-owner", "-p", "-xf", x, "-C", e.root)
	cp, err := FromDir(e.root)
	check(t, err)
	if d := Diff(src, cp, DiffOptions{}); len(d) != 0 {
		t.Fatalf("extraction differs:\n%s", strings.Join(d, "\n"))
	}

	orig := func(name string) *Node { return src.Node(name) }
	check(t, unix.Chmod(e.p("m/chmod"), 0o600))
	e.own("m/chown", 1, 2)
	e.mtime("m/touch", t0)
	check(t, os.WriteFile(e.p("m/content"), []byte("DATA\n"), 0))
	e.restore("m/content", orig("m/content"))
	check(t, os.WriteFile(e.p("m/size"), []byte("data\n\n"), 0))
	e.restore("m/size", orig("m/size"))
	check(t, os.Remove(e.p("m/remove")))
	e.file("m/add", "", 0o644)
	e.xattr("m/xattr", "user.x", "2")
	check(t, unix.Lremovexattr(e.p("m/xattr"), "user.gone"))
	e.xattr("m/xattr", "user.new", "\x00")
	e.restore("m/xattr", orig("m/xattr"))
	// Break the hard link: a new inode with the same content and metadata.
	check(t, os.Remove(e.p("m/link2")))
	e.file("m/link2", "data\n", 0o644)
	e.restore("m/link2", orig("m/link2"))
	check(t, os.Remove(e.p("m/sym")))
	check(t, os.Symlink("b", e.p("m/sym")))
	e.restore("m/sym", orig("m/sym"))
	check(t, os.Remove(e.p("m/dev")))
	e.mknod("m/dev", unix.S_IFCHR|0o600, 1, 5)
	e.restore("m/dev", orig("m/dev"))
	check(t, os.Remove(e.p("m/type")))
	e.dir("m/type", 0o644)
	e.restore("m/type", orig("m/type"))
	e.restore("m", orig("m"))

	got, err := FromDir(e.root)
	check(t, err)
	want := []string{
		"extra: m/add",
		"m/chmod: mode 0100644 != 0100600",
		fmt.Sprintf("m/chown: uid %d != 1", testUid),
		fmt.Sprintf("m/chown: gid %d != 2", testGid),
		fmt.Sprintf("m/content: content sha256:%x != sha256:%x", sum("data\n"), sum("DATA\n")),
		"m/dev: rdev 1:3 != 1:5",
		"missing: m/remove",
		"m/size: size 5 != 6",
		fmt.Sprintf("m/size: content sha256:%x != sha256:%x", sum("data\n"), sum("data\n\n")),
		`m/sym: target "a" != "b"`,
		fmt.Sprintf("m/touch: mtime %s != 2021-03-04T05:06:07Z", fmtTime(orig("m/touch").Mtime)),
		"m/type: type reg != dir",
		`m/xattr: xattr user.gone "g" != (none)`,
		`m/xattr: xattr user.new (none) != "\x00"`,
		`m/xattr: xattr user.x "1" != "2"`,
		"hard links: [m/link1 m/link2] != [m/link1] [m/link2]",
	}
	d := Diff(src, got, DiffOptions{})
	if !reflect.DeepEqual(d, want) {
		t.Errorf("Diff:\n%s\nwant:\n%s", strings.Join(d, "\n"), strings.Join(want, "\n"))
	}
	if d2 := Diff(src, got, DiffOptions{}); !reflect.DeepEqual(d, d2) {
		t.Errorf("Diff not deterministic")
	}
	// The reverse direction swaps the sides of every line.
	r := Diff(got, src, DiffOptions{})
	if len(r) != len(want) || r[0] != "missing: m/add" || r[len(r)-1] != "hard links: [m/link1] [m/link2] != [m/link1 m/link2]" {
		t.Errorf("reverse Diff:\n%s", strings.Join(r, "\n"))
	}

	// Ignore drops exactly what it names.
	ign := Diff(src, got, DiffOptions{Ignore: func(p, field string) bool {
		return p == "m/size" || field == "xattr:user.x" || field == "links" || field == "extra"
	}})
	var left []string
	for _, l := range want {
		if !strings.HasPrefix(l, "m/size:") && !strings.Contains(l, "user.x") &&
			!strings.HasPrefix(l, "hard links") && !strings.HasPrefix(l, "extra") {
			left = append(left, l)
		}
	}
	if !reflect.DeepEqual(ign, left) {
		t.Errorf("Diff with Ignore:\n%s\nwant:\n%s", strings.Join(ign, "\n"), strings.Join(left, "\n"))
	}
}

// testTree builds a tree from nodes, for the Diff unit tests.
func testTree(nodes ...*Node) *Tree {
	t := newTree()
	for _, n := range nodes {
		t.nodes[n.Path] = n
	}
	return t
}

func TestDiffOptions(t *testing.T) {
	mk := func(rootMode uint32, mtime time.Time, implied bool) *Tree {
		return testTree(
			&Node{Path: ".", Mode: erofs.S_IFDIR | rootMode, Mtime: mtime, Xattrs: map[string]string{"user.r": fmt.Sprint(rootMode)}},
			&Node{Path: "d", Mode: erofs.S_IFDIR | 0o755, Mtime: mtime, Implied: implied},
			&Node{Path: "d/f", Mode: erofs.S_IFREG | 0o644, Mtime: mtime},
		)
	}
	a := mk(0o755, t0.Add(100*time.Millisecond), true)
	b := mk(0o700, t0.Add(900*time.Millisecond), false)
	all := Diff(a, b, DiffOptions{})
	if len(all) != 5 { // root mode, mtime, xattr; d mtime; d/f mtime
		t.Errorf("Diff = %q", all)
	}
	got := Diff(a, b, DiffOptions{IgnoreRootMeta: true, IgnoreImpliedMtime: true})
	if len(got) != 1 || !strings.HasPrefix(got[0], "d/f: mtime ") {
		t.Errorf("Diff with IgnoreRootMeta, IgnoreImpliedMtime = %q", got)
	}
	// Implied is read from want only.
	if got := Diff(b, a, DiffOptions{IgnoreImpliedMtime: true, IgnoreRootMeta: true}); len(got) != 2 {
		t.Errorf("reverse = %q", got)
	}
	if got := Diff(a, b, DiffOptions{IgnoreRootMeta: true, MtimeGranularity: time.Second}); len(got) != 0 {
		t.Errorf("Diff with MtimeGranularity = %q", got)
	}
	// The root's type is still compared under IgnoreRootMeta.
	c := testTree(&Node{Path: ".", Mode: erofs.S_IFREG | 0o755})
	if got := Diff(a, c, DiffOptions{IgnoreRootMeta: true}); len(got) != 3 || got[0] != ".: type dir != reg" {
		t.Errorf("root type = %q", got)
	}
	// Whiteouts' permission bits, and only theirs.
	wh := func(perm uint32) *Tree {
		return testTree(&Node{Path: ".", Mode: erofs.S_IFDIR | 0o755},
			&Node{Path: "gone", Mode: erofs.S_IFCHR | perm}, &Node{Path: "null", Mode: erofs.S_IFCHR | perm, Devmajor: 1, Devminor: 3})
	}
	if got := Diff(wh(0), wh(0o644), DiffOptions{IgnoreWhiteoutPerm: true}); len(got) != 1 || !strings.HasPrefix(got[0], "null: mode") {
		t.Errorf("Diff with IgnoreWhiteoutPerm = %q, want null's mode alone", got)
	}
	if got := Diff(wh(0), wh(0o644), DiffOptions{}); len(got) != 2 {
		t.Errorf("Diff of whiteout modes = %q", got)
	}
}

func TestDiffLinks(t *testing.T) {
	reg := func(p string, link int) *Node { return &Node{Path: p, Mode: erofs.S_IFREG | 0o644, link: link} }
	want := testTree(&Node{Path: ".", Mode: erofs.S_IFDIR}, reg("a", 1), reg("b", 1), reg("c", 1), reg("d", 2), reg("e", 2), reg("x", 3), reg("y", 3))
	got := testTree(&Node{Path: ".", Mode: erofs.S_IFDIR}, reg("a", 7), reg("b", 7), reg("c", 0), reg("d", 7), reg("e", 7), reg("x", 4))
	d := Diff(want, got, DiffOptions{})
	// y is missing: its link with x is not reported again.
	wantD := []string{"missing: y", "hard links: [a b c] [d e] != [a b d e] [c]"}
	if !reflect.DeepEqual(d, wantD) {
		t.Errorf("Diff = %q, want %q", d, wantD)
	}
}
