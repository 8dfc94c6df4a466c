package convert_test

// The round-trip corpus: a source tree made on disk as root (every file
// type, size edge, name, owner, mode, time and xattr the issue lists), tars
// of it made by GNU tar in the gnu, pax and ustar formats, and hand-crafted
// tars (archive/tar) for what GNU tar never writes from a directory:
// whiteouts, duplicates, out-of-order entries, odd names, LIBARCHIVE xattrs.

import (
	"archive/tar"
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"golang.org/x/sys/unix"
)

// Times used across the corpus. t0 is the common mtime, so that most inodes
// are compact.
var (
	t0      = convtest.T0
	tNs     = time.Unix(1700000123, 123456789)
	tNeg    = time.Unix(-1000000, 5)
	tFar    = time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC) // > 2^32 seconds
	tEpoch  = time.Unix(0, 0)
	tOld    = time.Unix(946684800, 0) // 2000-01-01
	tBuild  = time.Unix(1600000000, 987654321)
	tBuild2 = time.Unix(1650000000, 0)
)

// Sizes of the big files (kept moderate: the corpus is rebuilt each run).
const (
	bigSize       = 5<<20 + 3
	sparseSize    = 32 << 20
	allHoleSize   = 16 << 20
	headHoleSize  = 8<<20 + 3000
	manyEntries   = 6000
	deepLevels    = 60
	longTargetLen = 4095
)

// capV2 is a VFS_CAP_REVISION_2 security.capability value granting
// cap_net_bind_service (bit 10) permitted and effective.
var capV2 = []byte{
	0x01, 0x00, 0x00, 0x02, // magic_etc: revision 2, effective
	0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // permitted[0], inheritable[0]
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // permitted[1], inheritable[1]
}

// aclValue encodes a POSIX ACL xattr (version 2): owner, user 1000 and
// mask with the owner's permission, group and other as given.
func aclValue(owner, group, other uint16) string {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, 2)
	entry := func(tag, perm uint16, id uint32) {
		b = binary.LittleEndian.AppendUint16(b, tag)
		b = binary.LittleEndian.AppendUint16(b, perm)
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	const undefined = 0xFFFFFFFF
	entry(0x01, owner, undefined) // ACL_USER_OBJ
	entry(0x02, owner, 1000)      // ACL_USER
	entry(0x04, group, undefined) // ACL_GROUP_OBJ
	entry(0x10, owner, undefined) // ACL_MASK
	entry(0x20, other, undefined) // ACL_OTHER
	return string(b)
}

// treeMaker creates a tree under root. Times are applied at the end, files
// first, then directories deepest first, since creating a child changes the
// mtime of its directory.
type treeMaker struct {
	t     testing.TB
	root  string
	times []timedPath
}

type timedPath struct {
	path  string
	mtime time.Time
	dir   bool
}

type meta struct {
	perm     uint32
	uid, gid int
	mtime    time.Time
	xattrs   [][2]string
}

func md(perm uint32) meta { return meta{perm: perm, mtime: t0} }

func (mt meta) Own(uid, gid int) meta { mt.uid, mt.gid = uid, gid; return mt }
func (mt meta) At(tm time.Time) meta  { mt.mtime = tm; return mt }
func (mt meta) x(name, value string) meta {
	mt.xattrs = append(mt.xattrs, [2]string{name, value})
	return mt
}

func (tm *treeMaker) abs(p string) string { return filepath.Join(tm.root, p) }

func (tm *treeMaker) check(err error, what, p string) {
	if err != nil {
		tm.t.Fatalf("corpus: %s %s: %v", what, p, err)
	}
}

// apply sets owner, mode, xattrs (after chown: chown clears the setuid
// bits and security.capability) and records the mtime.
func (tm *treeMaker) apply(p string, mt meta, kind uint32) {
	a := tm.abs(p)
	tm.check(unix.Lchown(a, mt.uid, mt.gid), "lchown", p)
	if kind != unix.S_IFLNK {
		tm.check(unix.Chmod(a, mt.perm), "chmod", p)
	}
	for _, x := range mt.xattrs {
		tm.check(unix.Lsetxattr(a, x[0], []byte(x[1]), 0), "lsetxattr "+x[0], p)
	}
	tm.times = append(tm.times, timedPath{p, mt.mtime, kind == unix.S_IFDIR})
}

func (tm *treeMaker) dir(p string, mt meta) {
	tm.check(os.MkdirAll(tm.abs(p), 0o755), "mkdir", p)
	tm.apply(p, mt, unix.S_IFDIR)
}

func (tm *treeMaker) file(p string, data []byte, mt meta) {
	tm.check(os.WriteFile(tm.abs(p), data, 0o600), "write", p)
	tm.apply(p, mt, unix.S_IFREG)
}

func (tm *treeMaker) symlink(p, target string, mt meta) {
	tm.check(os.Symlink(target, tm.abs(p)), "symlink", p)
	tm.apply(p, mt, unix.S_IFLNK)
}

func (tm *treeMaker) hardlink(p, target string) {
	tm.check(unix.Linkat(unix.AT_FDCWD, tm.abs(target), unix.AT_FDCWD, tm.abs(p), 0), "link", p)
}

func (tm *treeMaker) node(p string, typ uint32, major, minor uint32, mt meta) {
	tm.check(unix.Mknod(tm.abs(p), typ|0o600, int(unix.Mkdev(major, minor))), "mknod", p)
	tm.apply(p, mt, typ)
}

// sparse makes a file of size bytes with data only in the given extents.
func (tm *treeMaker) sparse(p string, size int64, extents [][2]int64, mt meta) {
	f, err := os.Create(tm.abs(p))
	tm.check(err, "create", p)
	tm.check(f.Truncate(size), "truncate", p)
	for i, e := range extents {
		_, err := f.WriteAt(convtest.Content(fmt.Sprintf("%s#%d", p, i), int(e[1])), e[0])
		tm.check(err, "write", p)
	}
	tm.check(f.Close(), "close", p)
	tm.apply(p, mt, unix.S_IFREG)
}

// finish applies the recorded mtimes.
func (tm *treeMaker) finish() {
	sort.SliceStable(tm.times, func(i, j int) bool {
		a, b := tm.times[i], tm.times[j]
		if a.dir != b.dir {
			return !a.dir
		}
		return strings.Count(a.path, "/") > strings.Count(b.path, "/")
	})
	for _, tp := range tm.times {
		ts, err := unix.TimeToTimespec(tp.mtime) // its fields are 32-bit on 32-bit machines
		tm.check(err, "mtime", tp.path)
		tm.check(unix.UtimesNanoAt(unix.AT_FDCWD, tm.abs(tp.path), []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW), "utimes", tp.path)
	}
}

// Paths in the full tree that the harness looks at directly.
const (
	pManyDir     = "many"
	pBig         = "sizes/big"
	pSparse      = "sparse/holes"
	pAllHole     = "sparse/allhole"
	pBigXattr    = "xattrs/big"
	pCap         = "xattrs/cap"
	pBigChar     = "devices/bigc"
	pBigBlock    = "devices/bigb"
	pHugeUID     = "owners/u4294967294"
	pNsTime      = "times/ns"
	pLongTarget  = "links/long4095"     // in the long-links tree
	pLayerWh     = "layer/deleted-file" // whiteout made from layer/.wh.deleted-file
	pLayerOpaque = "layer/opq"
)

var (
	name255     = strings.Repeat("n", 255)
	name255utf8 = strings.Repeat("日", 85) // 255 bytes
)

// deepPath is the 60-level directory chain of the full tree.
func deepPath() string {
	parts := []string{"deep"}
	for i := 1; i <= deepLevels; i++ {
		parts = append(parts, fmt.Sprintf("level%02d", i))
	}
	return strings.Join(parts, "/")
}

// longTarget returns a symlink target of n bytes.
func longTarget(n int) string {
	s := strings.Repeat("target-component/", n/17+1)
	return s[:n-1] + "x"
}

// makeFullTree creates the source tree every GNU tar of the corpus comes
// from (except ustar, which gets makeUstarTree).
func makeFullTree(t testing.TB, root string) {
	tm := &treeMaker{t: t, root: root}
	tm.check(os.MkdirAll(root, 0o755), "mkdir", root)
	tm.apply(".", md(0o755), unix.S_IFDIR)
	tm.file("top-file", []byte("top\n"), md(0o644))

	// Sizes around every block size the matrix uses, and a few MiB.
	tm.dir("sizes", md(0o755))
	tm.file("sizes/empty", nil, md(0o644))
	tm.file("sizes/one", []byte("1"), md(0o644))
	for _, bs := range []int{512, 1024, 4096} {
		for _, d := range []int{-1, 0, 1} {
			p := fmt.Sprintf("sizes/bs%d%+d", bs, d)
			tm.file(p, convtest.Content(p, bs+d), md(0o644))
		}
	}
	tm.file("sizes/two-blocks-plus", convtest.Content("8193", 8193), md(0o644))
	tm.file(pBig, convtest.Content(pBig, bigSize), md(0o644))
	tm.file("sizes/zeros", make([]byte, 1<<20), md(0o644))
	tm.file("sizes/text", bytes.Repeat([]byte("a line of text\n"), 300), md(0o644))

	// 6,000 entries in one directory: files of 0..6 bytes and a few dirs.
	tm.dir(pManyDir, md(0o755))
	for i := 0; i < manyEntries; i++ {
		p := fmt.Sprintf("%s/%05d-%s", pManyDir, i, strings.Repeat("x", i%53))
		if i%600 == 0 {
			tm.dir(p, md(0o755))
			continue
		}
		tm.file(p, convtest.Content(p, i%7), md(0o644))
	}

	// Names: 255 bytes, UTF-8, odd bytes.
	tm.dir("names", md(0o755))
	for _, n := range []string{
		name255, name255utf8, "héllo wörld", "日本語のファイル名", "emoji-😀-🎉",
		"new\nline", "tab\there", `back\slash`, `quote"'`, "star*?[x]", " leading space",
		"trailing space ", "-dash", "~tilde", "%percent%20", "=equals",
	} {
		tm.file("names/"+n, []byte(n), md(0o644))
	}
	dn := strings.Repeat("D", 255)
	tm.dir("names/"+dn, md(0o755))
	tm.file("names/"+dn+"/"+name255utf8, []byte("long path"), md(0o644))

	// 60-level deep path.
	dp := deepPath()
	tm.check(os.MkdirAll(tm.abs(dp), 0o755), "mkdir", dp)
	for p := dp; p != "."; p = filepath.Dir(p) {
		tm.apply(p, md(0o755), unix.S_IFDIR)
	}
	tm.file(dp+"/leaf", []byte("the bottom"), md(0o644))
	tm.symlink(dp+"/leaflink", strings.Repeat("../", deepLevels)+"top-file", md(0o777))

	// Long names (> 100 bytes) and long link names.
	tm.dir("long", md(0o755))
	tm.file("long/"+strings.Repeat("p", 150), []byte("long name"), md(0o644))
	ld := "long/" + strings.Repeat("d", 120)
	tm.dir(ld, md(0o755))
	tm.file(ld+"/"+strings.Repeat("f", 120), convtest.Content("longf", 5000), md(0o644))
	tm.hardlink("long/hardlink-to-long-name", ld+"/"+strings.Repeat("f", 120))
	tm.hardlink(ld+"/"+strings.Repeat("h", 110), "sizes/one")

	// Symlinks.
	tm.dir("links", md(0o755))
	tm.symlink("links/rel", "../sizes/one", md(0o777))
	tm.symlink("links/abs", "/etc/passwd", md(0o777))
	tm.symlink("links/dangling", "nowhere/at/all", md(0o777))
	tm.symlink("links/utf8", "日本語", md(0o777))
	tm.symlink("links/dir", "../deep", md(0o777))
	tm.symlink("links/owned", "x", md(0o777).Own(1234, 5678).At(tNs))
	tm.symlink("links/long300", longTarget(300), md(0o777))
	tm.symlink("links/xattr", "target", md(0o777).x("trusted.symlink", "on a symlink"))

	// Hard links: several names, one in another directory, other types.
	tm.dir("hard", md(0o755))
	tm.dir("hard2", md(0o755))
	tm.file("hard/a", convtest.Content("hard/a", 7000), md(0o640).Own(42, 43).x("user.h", "1"))
	tm.hardlink("hard/b", "hard/a")
	tm.hardlink("hard/c", "hard/a")
	tm.hardlink("hard2/d", "hard/a")
	tm.file("hard/e1", nil, md(0o644))
	tm.hardlink("hard/e2", "hard/e1")
	tm.node("hard/fifo", unix.S_IFIFO, 0, 0, md(0o644))
	tm.hardlink("hard/fifo-link", "hard/fifo")
	tm.symlink("hard/sym", "a", md(0o777))
	tm.hardlink("hard/sym-link", "hard/sym")
	tm.node("hard/chr", unix.S_IFCHR, 1, 7, md(0o600))
	tm.hardlink("hard2/chr-link", "hard/chr")

	// Xattrs: big, binary, many on one file, shared across files.
	tm.dir("xattrs", md(0o755).x("user.dir", "on a directory"))
	tm.file(pBigXattr, []byte("big"), md(0o644).x("user.big", string(convtest.Content("bigx", 3000))))
	tm.file(pCap, []byte("cap"), md(0o755).x("security.capability", string(capV2)))
	many := md(0o644)
	for i := 0; i < 40; i++ {
		many = many.x(fmt.Sprintf("user.m%02d", i), fmt.Sprintf("value-%d-%s", i, convtest.Content(fmt.Sprint(i), i%5)))
	}
	tm.file("xattrs/many", []byte("many"), many)
	for i := 0; i < 20; i++ {
		tm.file(fmt.Sprintf("xattrs/shared-%02d", i), []byte(fmt.Sprint(i)), md(0o644).
			x("user.shared", "the same value on twenty files").
			x("trusted.shared", string(convtest.Content("shared", 64))).
			x("user.own", fmt.Sprint("own-", i)))
	}
	for i := 0; i < 3; i++ { // a shared value longer than the small block sizes
		tm.file(fmt.Sprintf("xattrs/bigshared-%d", i), nil, md(0o644).x("user.bigshared", string(convtest.Content("bigshared", 2500))))
	}
	tm.file("xattrs/empty-value", nil, md(0o644).x("user.empty", ""))
	tm.file("xattrs/long-name", nil, md(0o644).x("user."+strings.Repeat("x", 240), "v"))
	tm.file("xattrs/trusted-security", nil, md(0o644).x("trusted.foo", "bar").x("security.test", "sec"))
	// POSIX ACLs, which GNU tar stores as SCHILY.xattr.system.posix_acl_*.
	tm.file("xattrs/acl", []byte("acl"), md(0o664).x("system.posix_acl_access", aclValue(6, 4, 4)))
	tm.dir("xattrs/acl-dir", md(0o755).x("system.posix_acl_default", aclValue(7, 5, 5)))

	// Devices and FIFOs.
	tm.dir("devices", md(0o755))
	tm.node("devices/null", unix.S_IFCHR, 1, 3, md(0o666))
	tm.node("devices/sda", unix.S_IFBLK, 8, 0, md(0o660).Own(0, 6))
	tm.node(pBigChar, unix.S_IFCHR, 4095, 1048575, md(0o600))
	tm.node(pBigBlock, unix.S_IFBLK, 259, 300000, md(0o600))
	tm.node("devices/zero-zero", unix.S_IFCHR, 0, 0, md(0o600))
	tm.node("devices/xattr", unix.S_IFCHR, 5, 1, md(0o620).x("trusted.dev", "x"))
	tm.dir("fifos", md(0o755))
	tm.node("fifos/fifo", unix.S_IFIFO, 0, 0, md(0o644))
	tm.node("fifos/fifo-owned", unix.S_IFIFO, 0, 0, md(0o1600).Own(7, 8).At(tNs))

	// Mode bits.
	tm.dir("perms", md(0o755))
	tm.file("perms/suid", []byte("#!/bin/sh\n"), md(0o4755))
	tm.file("perms/sgid", []byte("#!/bin/sh\n"), md(0o2755).Own(0, 50))
	tm.file("perms/sticky", nil, md(0o1644))
	tm.file("perms/all", nil, md(0o7777))
	tm.file("perms/none", []byte("x"), md(0))
	tm.dir("perms/sticky-dir", md(0o1777))
	tm.dir("perms/sgid-dir", md(0o2775))
	tm.dir("perms/dir-0700", md(0o700))
	tm.dir("perms/dir-0000", md(0))
	tm.file("perms/dir-0000/inside", []byte("x"), md(0o644))

	// Owners beyond 16 bits.
	tm.dir("owners", md(0o755).Own(100000, 100000))
	tm.file("owners/u100000", nil, md(0o644).Own(100000, 100000))
	tm.file(pHugeUID, []byte("x"), md(0o644).Own(4294967294, 4294967294))
	tm.file("owners/u65535", nil, md(0o644).Own(65535, 65535))
	tm.file("owners/u65536", nil, md(0o644).Own(65536, 65536))
	tm.file("owners/mixed", nil, md(0o644).Own(0, 100000))

	// Times: nanoseconds, before 1970, after 2106, the epoch.
	tm.dir("times", md(0o755).At(tNs))
	tm.file(pNsTime, []byte("ns"), md(0o644).At(tNs))
	tm.file("times/neg", []byte("neg"), md(0o644).At(tNeg))
	tm.file("times/far", []byte("far"), md(0o644).At(tFar))
	tm.file("times/epoch", nil, md(0o644).At(tEpoch))
	tm.file("times/old", nil, md(0o644).At(tOld))
	tm.dir("times/ns-dir", md(0o755).At(time.Unix(1700000000, 1)))
	tm.symlink("times/ns-link", "ns", md(0o777).At(time.Unix(1700000000, 999999999)))

	// Sparse files (GNU tar --sparse finds the holes with SEEK_HOLE).
	tm.dir("sparse", md(0o755))
	tm.sparse(pSparse, sparseSize, [][2]int64{{0, 8192}, {1 << 20, 4096}, {20<<20 + 5, 100}}, md(0o644))
	tm.sparse(pAllHole, allHoleSize, nil, md(0o644))
	tm.sparse("sparse/headhole", headHoleSize, [][2]int64{{8 << 20, 3000}}, md(0o644))

	// An OCI layer's whiteouts as GNU tar sees them: plain files.
	tm.dir("layer", md(0o755))
	tm.file("layer/.wh.deleted-file", nil, md(0o644))
	tm.file("layer/.wh.deleted-dir", nil, md(0o600).Own(3, 4).At(tNs))
	tm.dir(pLayerOpaque, md(0o750))
	tm.file(pLayerOpaque+"/.wh..wh..opq", nil, md(0o644))
	tm.file(pLayerOpaque+"/kept", []byte("kept"), md(0o644))
	tm.dir("layer/.wh..wh.plnk", md(0o700))
	tm.file("layer/kept", []byte("kept"), md(0o644))

	tm.finish()
}

// makeLongLinkTree creates symlinks with targets longer than the smaller
// block sizes (up to the 4095 bytes Linux allows), each followed in the
// image's late area by a directory too big to be inline. They have a tree
// of their own so that the full tree is checked at every block size apart
// from them.
func makeLongLinkTree(t testing.TB, root string) {
	tm := &treeMaker{t: t, root: root}
	tm.check(os.MkdirAll(root, 0o755), "mkdir", root)
	tm.apply(".", md(0o755), unix.S_IFDIR)
	tm.dir("links", md(0o755))
	for _, n := range []int{511, 512, 513, 1000, 1024, 1025, 2000, 4000, longTargetLen} {
		tm.symlink(fmt.Sprintf("links/long%04d", n), longTarget(n), md(0o777))
	}
	tm.dir("links/z-after", md(0o755))
	for i := 0; i < 100; i++ {
		tm.file(fmt.Sprintf("links/z-after/entry-with-a-longish-name-%03d", i), nil, md(0o644))
	}
	tm.finish()
}

// makeUstarTree creates what a ustar archive can hold: short names (one
// using the prefix field), small owners, no xattrs, whole-second times.
func makeUstarTree(t testing.TB, root string) {
	tm := &treeMaker{t: t, root: root}
	tm.check(os.MkdirAll(root, 0o755), "mkdir", root)
	tm.apply(".", md(0o755), unix.S_IFDIR)
	tm.dir("sizes", md(0o755))
	tm.file("sizes/empty", nil, md(0o644))
	tm.file("sizes/one", []byte("1"), md(0o644))
	for _, n := range []int{511, 512, 513, 4095, 4096, 4097, 1<<20 + 1} {
		p := fmt.Sprintf("sizes/s%d", n)
		tm.file(p, convtest.Content(p, n), md(0o644))
	}
	tm.dir("dev", md(0o755))
	tm.node("dev/null", unix.S_IFCHR, 1, 3, md(0o666))
	tm.node("dev/big", unix.S_IFCHR, 4095, 1048575, md(0o600))
	tm.node("dev/blk", unix.S_IFBLK, 259, 300000, md(0o660))
	tm.node("dev/fifo", unix.S_IFIFO, 0, 0, md(0o644))
	tm.file("suid", nil, md(0o4755))
	tm.dir("sticky", md(0o1777))
	tm.file("owned", []byte("o"), md(0o600).Own(100000, 2000000))
	tm.file("hl", []byte("hard"), md(0o644).At(tOld))
	tm.hardlink("hl2", "hl")
	tm.symlink("sym", "sizes/one", md(0o777))
	pre := "prefix-" + strings.Repeat("p", 90)
	tm.dir(pre, md(0o755))
	tm.file(pre+"/"+strings.Repeat("f", 95), []byte("split name"), md(0o644))
	tm.finish()
}

// gnuTar runs GNU tar with args, failing the test on a non-zero exit.
func gnuTar(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command("tar", args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tar %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// topNames lists the entries of dir, for a tar without a root entry.
func topNames(t testing.TB, dir string) []string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ns []string
	for _, e := range ents {
		ns = append(ns, e.Name())
	}
	return ns
}

// corpusTar is one archive of the corpus.
type corpusTar struct {
	name string
	path string
	// refOK: GNU tar's extraction of this tar is a valid reference (it is
	// not for tars whose meaning depends on entry order in ways an
	// extraction cannot show).
	refOK bool
	// refIgnore drops reference differences GNU tar cannot help (it does
	// not read LIBARCHIVE.xattr records).
	refIgnore func(path, field string) bool
	// full marks the big GNU-made tars the direct assertions look into.
	full bool
	// minEntries is a floor on the mounted tree's size.
	minEntries int
	// sparse marks the tars of the sparse directory alone, longLinks those
	// of the long-links tree.
	sparse, longLinks bool
}

// corpus is the whole generated corpus, under one temp dir.
type corpus struct {
	dir           string
	src, ustarSrc string // the source trees
	tars          map[string]*corpusTar
}

func (c *corpus) get(t testing.TB, name string) *corpusTar {
	ct := c.tars[name]
	if ct == nil {
		t.Fatalf("corpus has no tar %q", name)
	}
	return ct
}

// buildCorpus makes the source trees and every tar.
func buildCorpus(t testing.TB, dir string) *corpus {
	start := time.Now()
	c := &corpus{dir: dir, tars: map[string]*corpusTar{}}
	src := filepath.Join(dir, "src")
	makeFullTree(t, src)
	usrc := filepath.Join(dir, "ustarsrc")
	makeUstarTree(t, usrc)
	c.src, c.ustarSrc = src, usrc

	lsrc := filepath.Join(dir, "longlinksrc")
	makeLongLinkTree(t, lsrc)

	gnuArgs := []string{"--xattrs", "--xattrs-include=*", "--numeric-owner", "--sparse"}
	add := func(ct *corpusTar) { c.tars[ct.name] = ct }

	// GNU format, with the root entry "./" and old GNU sparse headers.
	p := filepath.Join(dir, "full-gnu.tar")
	// (GNU tar stores xattrs only in POSIX archives.)
	gnuTar(t, "--numeric-owner", "--sparse", "--format=gnu", "-cf", p, "-C", src, ".")
	add(&corpusTar{name: "full-gnu", path: p, refOK: true, full: true, minEntries: manyEntries + 150})

	// PAX with sparse 1.0, xattrs and ns times; no root entry.
	p = filepath.Join(dir, "full-pax.tar")
	gnuTar(t, append(append(gnuArgs, "--format=pax", "--sparse-version=1.0", "-cf", p, "-C", src), topNames(t, src)...)...)
	add(&corpusTar{name: "full-pax", path: p, refOK: true, full: true, minEntries: manyEntries + 150})

	// The sparse files alone, in each sparse format GNU tar writes: old GNU
	// headers, PAX 0.1 (GNU.sparse.map) and PAX 1.0 (map in the data).
	// Their images must stay small: the holes are not stored.
	for _, f := range [][2]string{{"sparse-gnu", "--format=gnu"}, {"sparse-pax01", "--sparse-version=0.1"}, {"sparse-pax10", "--sparse-version=1.0"}} {
		p = filepath.Join(dir, f[0]+".tar")
		args := []string{"--numeric-owner", "--sparse", f[1]}
		if f[0] != "sparse-gnu" {
			args = append(args, "--format=pax")
		}
		gnuTar(t, append(args, "-cf", p, "-C", src, "sparse")...)
		add(&corpusTar{name: f[0], path: p, refOK: true, sparse: true, minEntries: 5})
	}

	// Long symlink targets: GNU ././@LongLink 'K' records and PAX linkpath.
	p = filepath.Join(dir, "longlinks-gnu.tar")
	gnuTar(t, "--numeric-owner", "--format=gnu", "-cf", p, "-C", lsrc, ".")
	add(&corpusTar{name: "longlinks-gnu", path: p, refOK: true, longLinks: true, minEntries: 110})
	p = filepath.Join(dir, "longlinks-pax.tar")
	gnuTar(t, "--numeric-owner", "--format=pax", "-cf", p, "-C", lsrc, "links")
	add(&corpusTar{name: "longlinks-pax", path: p, refOK: true, longLinks: true, minEntries: 110})

	p = filepath.Join(dir, "ustar.tar")
	gnuTar(t, "--numeric-owner", "--format=ustar", "-cf", p, "-C", usrc, ".")
	add(&corpusTar{name: "ustar", path: p, refOK: true, minEntries: 20})

	for _, h := range craftedTars() {
		p := filepath.Join(dir, h.name+".tar")
		if err := os.WriteFile(p, h.bytes(t), 0o644); err != nil {
			t.Fatal(err)
		}
		add(&corpusTar{name: h.name, path: p, refOK: h.refOK, refIgnore: h.refIgnore, minEntries: h.minEntries})
	}
	checkCorpus(t, c)
	t.Logf("corpus: %d tars in %v", len(c.tars), time.Since(start).Round(time.Millisecond))
	return c
}

// checkCorpus makes sure GNU tar wrote what the cases are named after: the
// sparse format of each tar, and xattrs in the PAX one.
func checkCorpus(t testing.TB, c *corpus) {
	want := map[string]func(h *tar.Header) bool{
		"full-gnu":     func(h *tar.Header) bool { return h.Typeflag == tar.TypeGNUSparse },
		"sparse-gnu":   func(h *tar.Header) bool { return h.Typeflag == tar.TypeGNUSparse },
		"sparse-pax01": func(h *tar.Header) bool { return h.PAXRecords["GNU.sparse.map"] != "" },
		"full-pax":     func(h *tar.Header) bool { return h.PAXRecords["GNU.sparse.major"] == "1" },
		"sparse-pax10": func(h *tar.Header) bool { return h.PAXRecords["GNU.sparse.major"] == "1" },
	}
	for name, ok := range want {
		found := false
		for _, h := range readTarHeaders(t, c.get(t, name).path) {
			if strings.TrimPrefix(h.Name, "./") == pSparse {
				found = true
				if !ok(h) {
					t.Fatalf("corpus: %s: %s is not in the expected sparse format (type %q, PAX %v)", name, pSparse, h.Typeflag, h.PAXRecords)
				}
			}
			if name == "full-pax" && h.Name == pBigXattr && len(h.PAXRecords["SCHILY.xattr.user.big"]) != 3000 {
				t.Fatalf("corpus: GNU tar stored no user.big on %s", pBigXattr)
			}
		}
		if !found {
			t.Fatalf("corpus: %s has no %s", name, pSparse)
		}
	}
}

// readTarHeaders lists the headers of a tar file.
func readTarHeaders(t testing.TB, path string) []*tar.Header {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var hs []*tar.Header
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return hs
		}
		if err != nil {
			t.Fatalf("corpus: %s: %v", path, err)
		}
		hs = append(hs, h)
	}
}

// crafted is a tar written entry by entry with archive/tar (bytes).
type crafted struct {
	name       string
	entries    []convtest.TarEntry
	refOK      bool
	refIgnore  func(path, field string) bool
	minEntries int
}

func (c *crafted) bytes(t testing.TB) []byte { return convtest.TarOf(t, c.entries...) }

// Paths in crafted tars that the harness looks at directly.
const (
	pWhGone     = "dir1/gone"
	pWhOpaque   = "opq"
	pWhUnlisted = "unlisted"
)

func craftedTars() []*crafted {
	t1 := time.Unix(1700000001, 111)
	t2 := time.Unix(1700000002, 222222222)
	t3 := time.Unix(1700000003, 0)
	return []*crafted{
		{
			// OCI whiteouts: for a file, for a directory, at the root, in
			// listed and unlisted directories, markers before their
			// directory, aufs meta entries.
			name: "whiteouts", refOK: true, minEntries: 15,
			entries: []convtest.TarEntry{
				convtest.TarDir("dir1/", 0o755, t1),
				convtest.TarFile("dir1/keep", "keep me", 0o644, t0),
				convtest.TarFile("dir1/.wh.gone", "", 0o600, t2).Own(1000, 1001),
				convtest.TarFile("dir1/.wh.gonedir", "", 0o644, t0).PAX("SCHILY.xattr.trusted.on-whiteout", "1"),
				convtest.TarFile(".wh.rootgone", "", 0o644, t0),
				convtest.TarDir("opq/", 0o750, t1),
				convtest.TarFile("opq/.wh..wh..opq", "", 0o644, t0),
				convtest.TarFile("opq/new", "new", 0o644, t0),
				convtest.TarFile("unlisted/.wh..wh..opq", "", 0o644, t0),
				convtest.TarFile("unlisted/inner/f", "f", 0o644, t0),
				convtest.TarFile("late/.wh..wh..opq", "", 0o644, t0),
				convtest.TarFile("late/x", "x", 0o644, t0),
				convtest.TarDir("late/", 0o700, t3).Own(7, 8),
				convtest.TarFile("late2/.wh.x", "", 0o644, t0),
				convtest.TarDir("late2/", 0o711, t2),
				convtest.TarDir(".wh..wh.plnk/", 0o700, t0),
				convtest.TarFile(".wh..wh.aufs", "", 0o644, t0),
				convtest.TarDir("both/", 0o755, t1),
				convtest.TarFile("both/.wh.a", "", 0o644, t0),
				convtest.TarFile("both/.wh..wh..opq", "", 0o644, t0),
				convtest.TarFile("both/b", "b", 0o644, t0),
				convtest.TarFile("deep/er/.wh.z", "", 0o644, t0),
				convtest.TarFile(".wh..wh..opq", "", 0o644, t0),
			},
		},
		{
			// Nothing but the end-of-archive blocks: an image with an
			// implied root.
			name: "empty", refOK: true, minEntries: 1,
		},
		{
			// A whiteout and then the same name in one layer: the later
			// entry wins; whether the directory keeps trusted.overlay.origin
			// is what fstree documents (only if a whiteout remains).
			name: "wh-then-file", refOK: false, minEntries: 3,
			entries: []convtest.TarEntry{
				convtest.TarDir("d/", 0o755, t1),
				convtest.TarFile("d/.wh.foo", "", 0o644, t0),
				convtest.TarFile("d/foo", "back", 0o644, t0),
			},
		},
		{
			// Duplicates and out-of-order entries, all things GNU tar
			// extracts the same way.
			name: "dups", refOK: true, minEntries: 12,
			entries: []convtest.TarEntry{
				convtest.TarFile("d/f", "before its dir", 0o644, t0),
				convtest.TarDir("d/", 0o700, t1).Own(5, 6),
				convtest.TarFile("twice", "first", 0o600, t0),
				convtest.TarFile("twice", "second, longer content", 0o644, t2).Own(3, 3),
				convtest.TarDir("dd/", 0o700, t1).Own(1, 1),
				convtest.TarFile("dd/x", "x", 0o644, t0),
				convtest.TarDir("dd/", 0o755, t3).Own(2, 2).PAX("SCHILY.xattr.user.b", "2"),
				convtest.TarSym("sym", "a", t0),
				convtest.TarSym("sym", "b", t1),
				convtest.TarFile("z/b/c/file", "deep first", 0o644, t0),
				convtest.TarDir("z/b/", 0o751, t2),
				convtest.TarDir("z/", 0o755, t1),
				convtest.TarLink("hl", "twice"),
				convtest.TarLink("hl-of-hl", "hl"),
				convtest.TarLink("hl-dot", "./twice"),
				convtest.TarLink("hl-abs", "/twice"),
				convtest.TarFile("tc", "a file first", 0o644, t0),
				convtest.TarDir("tc/", 0o755, t1),
				convtest.TarFile("tc/y", "y", 0o644, t0),
				convtest.TarDir("./", 0o711, t2).Own(0, 0), // the root, last
			},
			// The converter makes tc opaque: its file replaced what
			// layers below have there. GNU tar knows no layers.
			refIgnore: func(p, field string) bool { return p == "tc" && field == "xattr:trusted.overlay.opaque" },
		},
		{
			// Tar names: "./" root entry, "./" and "/" prefixes, "//",
			// "." components, implied parents, a PAX global header.
			name: "paths", refOK: true, minEntries: 15,
			entries: []convtest.TarEntry{
				{Hdr: tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "pax_global_header", PAXRecords: map[string]string{"comment": "global"}, Format: tar.FormatPAX}},
				convtest.TarDir("./", 0o750, t1).PAX("SCHILY.xattr.user.root", "r"),
				convtest.TarFile("./a", "a", 0o644, t0),
				convtest.TarFile("././b", "b", 0o644, t0),
				convtest.TarFile("c//d", "d", 0o644, t0),
				convtest.TarFile("/abs/x", "abs", 0o644, t0),
				convtest.TarDir("/abs2/", 0o700, t2),
				convtest.TarFile("/abs2/y", "y", 0o644, t0),
				convtest.TarFile("e/./f", "f", 0o644, t0),
				convtest.TarFile("g/h/i/j/k", "k", 0o644, t0),
				convtest.TarDir("trailing/", 0o755, t0),
				{Hdr: tar.Header{Typeflag: tar.TypeDir, Name: "noslash", Mode: 0o755, ModTime: t2, Format: tar.FormatPAX}},
				convtest.TarFile("//double-leading", "dl", 0o644, t0),
				convtest.TarFile("gnu-long/"+strings.Repeat("L", 200), "gnu longname", 0o644, t0).Format(tar.FormatGNU),
				convtest.TarSym("gnu-longlink", strings.Repeat("K", 300), t0).Format(tar.FormatGNU),
				convtest.TarFile("pax-long/"+strings.Repeat("P", 200), "pax path", 0o644, t0),
				convtest.TarSym("pax-longlink", strings.Repeat("Q", 300), t0),
				convtest.TarLink("gnu-long/hardlink", "gnu-long/"+strings.Repeat("L", 200)).Format(tar.FormatGNU),
				convtest.TarFile("ustar-file", "u", 0o644, t3).Format(tar.FormatUSTAR),
			},
		},
		{
			// LIBARCHIVE.xattr records (URL-encoded name, base64 value),
			// SCHILY winning over LIBARCHIVE. GNU tar ignores LIBARCHIVE.*.
			name: "libarchive", refOK: true, minEntries: 5,
			refIgnore: func(p, field string) bool { return strings.HasPrefix(field, "xattr:") },
			entries: []convtest.TarEntry{
				convtest.TarFile("la", "la", 0o644, t0).PAX("LIBARCHIVE.xattr.user.foo", base64.StdEncoding.EncodeToString([]byte("bar\x00baz"))),
				convtest.TarFile("la-space", "", 0o644, t0).PAX("LIBARCHIVE.xattr.user.sp%20ace%3D", base64.StdEncoding.EncodeToString([]byte("v"))),
				convtest.TarFile("la-both", "", 0o644, t0).
					PAX("SCHILY.xattr.user.dup", "schily").
					PAX("LIBARCHIVE.xattr.user.dup", base64.StdEncoding.EncodeToString([]byte("libarchive"))),
				convtest.TarFile("la-cap", "", 0o755, t0).PAX("LIBARCHIVE.xattr.security.capability", base64.StdEncoding.EncodeToString(capV2)),
				convtest.TarFile("la-raw", "", 0o644, t0).PAX("LIBARCHIVE.xattr.user.raw", base64.RawStdEncoding.EncodeToString([]byte("ab"))),
				convtest.TarDir("la-dir/", 0o755, t1).PAX("LIBARCHIVE.xattr.trusted.d", base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 255})),
			},
		},
		xattrLimits(),
		{
			// Replacements whose outcome only the entry order tells: checked
			// against fstree.FromTar, not against an extraction.
			name: "replace", refOK: false, minEntries: 8,
			entries: []convtest.TarEntry{
				convtest.TarDir("r1/", 0o755, t0),
				convtest.TarFile("r1/child", "gone", 0o644, t0),
				convtest.TarFile("r1", "dir became a file", 0o644, t1),
				convtest.TarFile("r2", "file", 0o644, t0),
				convtest.TarSym("r2", "became a symlink", t1),
				convtest.TarSym("r3", "x", t0),
				convtest.TarDir("r3/", 0o700, t2),
				convtest.TarFile("r3/in", "in", 0o644, t0),
				convtest.TarFile("orig", "v1", 0o644, t0),
				convtest.TarLink("hl", "orig"),
				convtest.TarFile("orig", "v2 replaces v1", 0o600, t1),
				convtest.TarDir("dx/", 0o755, t0).PAX("SCHILY.xattr.user.a", "1"),
				convtest.TarDir("dx/", 0o755, t0).PAX("SCHILY.xattr.user.b", "2"),
				convtest.TarFile("r4/.wh..wh..opq", "", 0o644, t0),
				convtest.TarFile("r4", "file between", 0o644, t0),
				convtest.TarDir("r4/", 0o755, t3),
				// ".." that stays inside the root: GNU tar refuses the
				// member, the converter and fstree take it as "inside".
				convtest.TarFile("dotdot/../inside", "in", 0o644, t0),
				convtest.TarFile("r5", "file", 0o644, t0),
				{Hdr: tar.Header{Typeflag: tar.TypeChar, Name: "r5", Mode: 0o600, Devmajor: 1, Devminor: 5, ModTime: t0}},
			},
		},
	}
}

// xattrLimits is a tar at the edges of EROFS xattrs: a 65535-byte value
// (the u16 e_value_size), an empty one, and 300 xattrs shared between two
// files, more than the 255 an inode's u8 h_shared_count can list. Checked
// against fstree.FromTar only: a disk filesystem could not extract it.
func xattrLimits() *crafted {
	s1 := convtest.TarFile("shared-1", "1", 0o644, t0)
	s2 := convtest.TarFile("shared-2", "2", 0o644, t0)
	for i := 0; i < 300; i++ {
		k, v := fmt.Sprintf("SCHILY.xattr.user.s%03d", i), fmt.Sprintf("value %d", i)
		s1, s2 = s1.PAX(k, v), s2.PAX(k, v)
	}
	return &crafted{
		name: "xattr-limits", minEntries: 4,
		entries: []convtest.TarEntry{
			convtest.TarFile("max-value", "m", 0o644, t0).PAX("SCHILY.xattr.user.max", string(convtest.Content("max", 65535))).PAX("SCHILY.xattr.user.empty", ""),
			s1, s2,
		},
	}
}
