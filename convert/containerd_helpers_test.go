package convert_test

// Helpers of the containerd end-to-end tests (containerd_test.go): finding
// containerd 2.4 (containerd, ctr, containerd-shim-runc-v2) and runc,
// starting a containerd of the test's own with the EROFS snapshotter and
// differ and a stand-in mkfs.erofs, running ctr, a test image with a static
// busybox under the layers of convtest.TestImageLayers, and what a container of that
// image must show.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/internal/mountinfo"
)

// containerdVersion is the containerd the tests are written against (its
// EROFS media types, os.features routing and layer content cache).
const containerdVersion = "v2.4.2"

// shortContainerd is why the containerd tests skip under -short.
const shortContainerd = "-short: no containerd, root or kernel mounts; make test runs them"

// needTool fails the test in CI (CI installs everything, see .ci/run) and
// skips it elsewhere, with the reason.
func needTool(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// containerdBinDir finds the directory holding containerd, ctr and
// containerd-shim-runc-v2: $OCIEROFS_CONTAINERD_BIN, else the cache
// directory .ci/run installs into (${OCIEROFS_CACHE:-~/.cache/ocierofs}/
// containerd-VERSION), else $(go env GOPATH)/bin.
func containerdBinDir(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip(shortContainerd)
	}
	var dirs []string
	if d := os.Getenv("OCIEROFS_CONTAINERD_BIN"); d != "" {
		dirs = append(dirs, d)
	}
	// The cache directory before GOPATH/bin: it holds exactly
	// containerdVersion, GOPATH/bin whatever was installed last.
	cache := os.Getenv("OCIEROFS_CACHE")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache", "ocierofs")
		}
	}
	if cache != "" {
		dirs = append(dirs, filepath.Join(cache, "containerd-"+containerdVersion))
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, p := range filepath.SplitList(strings.TrimSpace(string(out))) {
			dirs = append(dirs, filepath.Join(p, "bin"))
		}
	}
	for _, d := range dirs {
		ok := true
		for _, b := range []string{"containerd", "ctr", "containerd-shim-runc-v2"} {
			if fi, err := os.Stat(filepath.Join(d, b)); err != nil || fi.Mode()&0o111 == 0 {
				ok = false
			}
		}
		if ok {
			return d
		}
	}
	needTool(t, fmt.Sprintf("no containerd, ctr and containerd-shim-runc-v2 in %q (set OCIEROFS_CONTAINERD_BIN, or: "+
		"GOBIN=DIR go install github.com/containerd/containerd/v2/cmd/{containerd,ctr,containerd-shim-runc-v2}@%s)", dirs, containerdVersion))
	return ""
}

// runcBinary finds runc (Debian package runc).
func runcBinary(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip(shortContainerd)
	}
	for _, p := range []string{"runc", "/usr/sbin/runc", "/usr/bin/runc"} {
		if bin, err := exec.LookPath(p); err == nil {
			return bin
		}
	}
	needTool(t, "no runc (Debian package runc: apt-get install -y runc)")
	return ""
}

// staticBusybox is the bytes of a statically linked busybox (Debian package
// busybox-static), the only program of the containers of these tests.
func staticBusybox(t testing.TB) []byte {
	t.Helper()
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		static := true
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if static {
			b, err := os.ReadFile(p)
			must(t, err)
			return b
		}
	}
	needTool(t, "no statically linked busybox in /bin or /usr/bin (Debian package busybox-static)")
	return nil
}

// requireContainerdHost checks what containerd's EROFS snapshotter needs
// from the kernel. Not being root skips (as every mounting test does); a
// root without erofs or overlay fails: containerd could not run what
// ocierofs makes on this machine. Under -short it skips.
func requireContainerdHost(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip(shortContainerd)
	}
	if os.Geteuid() != 0 {
		t.Skip("containerd needs root")
	}
	for _, fs := range []string{"erofs", "overlay"} {
		if !convtest.HasFilesystem(fs) {
			exec.Command("modprobe", fs).Run()
		}
		if !convtest.HasFilesystem(fs) {
			t.Fatalf("the kernel has no %s (not in /proc/filesystems, even after modprobe %s): containerd's EROFS snapshotter cannot mount layers", fs, fs)
		}
	}
}

// ocierofsCLI builds cmd/ocierofs into a directory of the test.
func ocierofsCLI(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ocierofs")
	cmd := exec.Command("go", "build", "-o", bin, "../cmd/ocierofs")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/ocierofs: %v\n%s", err, out)
	}
	return bin
}

// runOcierofs runs the CLI and returns its stdout.
func runOcierofs(t testing.TB, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("ocierofs %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	t.Logf("ocierofs %s: %.2fs", strings.Join(args, " "), time.Since(start).Seconds())
	return stdout.Bytes()
}

// ---------------------------------------------------------------------------
// containerd.

// ctrd is one containerd process of a test.
type ctrd struct {
	bin       string // directory of containerd and ctr
	addr      string // its gRPC socket
	root      string
	state     string
	sockDir   string
	config    string
	logPath   string
	mkfsCalls string // the stand-in mkfs.erofs appends its arguments here
	ctrPath   string // PATH of ctr (default: nothing on it)
	cmd       *exec.Cmd
	done      chan struct{}
	// namespaces ctr was asked to use: the runc shim keeps its state in
	// /run/containerd/runc/NAMESPACE whatever containerd's state is.
	namespaces map[string]bool
}

// ctrdOptions is what a test wants its containerd to be configured with.
type ctrdOptions struct {
	// layerContentCaches are the EROFS snapshotter's layer_content_caches.
	layerContentCaches []string
	// dmverityMode is the EROFS snapshotter's dmverity_mode ("": auto, its default).
	dmverityMode string
	// mkfs, if set, is the ocierofs binary that containerd runs as its
	// mkfs.erofs (recording each call), instead of the failing stand-in.
	mkfs string
	// mkfsOptions are the EROFS differ's mkfs_options; tarIndex its
	// enable_tar_index.
	mkfsOptions []string
	tarIndex    bool
	// differs are the diff service's defaults (nil: erofs, then walking).
	differs []string
}

// standInMkfs is the only mkfs.erofs on containerd's PATH: it answers
// --help as mkfs.erofs 1.7+ does (containerd's EROFS differ loads only if
// the help text offers --tar=), and records and fails any other call.
const standInMkfs = `#!/bin/sh
if [ "$1" = "--help" ] || [ "$1" = "-h" ]; then
	echo "usage: [options] FILE SOURCE(s)"
	echo " --tar=X               generate a full or index-only image from a tarball(-ish) source"
	echo " --aufs                replace aufs special files with overlayfs metadata"
	echo "(stand-in for the ocierofs tests: it converts nothing)"
	exit 0
fi
echo "$*" >> %s
echo "stand-in mkfs.erofs of the ocierofs tests: containerd was not meant to convert anything" >&2
exit 1
`

// ocierofsMkfs is containerd's mkfs.erofs when a test wants ocierofs to be
// it: it records its arguments, then runs ocierofs by the name mkfs.erofs.
const ocierofsMkfs = `#!/bin/sh
echo "$*" >> %s
exec %s "$@"
`

const ctrdConfig = `# containerd %s, written by the ocierofs tests.
version = 4
root = %q
state = %q
# Neither CRI nor NRI: the test drives containerd with ctr, and NRI's
# socket is machine-wide.
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.cri.v1.images",
  "io.containerd.cri.v1.runtime",
  "io.containerd.podsandbox.controller.v1.podsandbox",
  "io.containerd.nri.v1.nri",
]

# In a version 4 config the sockets are options of the server plugins: the
# top-level [grpc] and [ttrpc] tables are read only by older versions (and
# migrated), a version 4 file that uses them gets the machine's
# /run/containerd/containerd.sock. Without an address the debug and metrics
# servers stay off.
[plugins.'io.containerd.server.v1.grpc']
  address = %q

[plugins.'io.containerd.server.v1.ttrpc']
  address = %q

# The opt plugin makes PATH/bin and PATH/lib and puts them first in
# containerd's PATH (default /opt/containerd): keep it in the test's
# directory, so that the stand-in is the only mkfs.erofs containerd sees.
[plugins.'io.containerd.internal.v1.opt']
  path = %q

# The layer content cache is the EROFS snapshotter's (not the differ's).
[plugins.'io.containerd.snapshotter.v1.erofs']
  layer_content_caches = %s
  dmverity_mode = %q

[plugins.'io.containerd.differ.v1.erofs']
  mkfs_options = %s
  enable_tar_index = %v

# Client-side unpacks (ctr run of an image not yet unpacked) go through the
# diff service: EROFS first, as docs/snapshotters/erofs.md says.
[plugins.'io.containerd.service.v1.diff-service']
  default = %s
`

// ocierofsAsMkfs puts in dir a mkfs.erofs that records its arguments in
// calls and runs the ocierofs binary bin by the name mkfs.erofs.
func ocierofsAsMkfs(t testing.TB, dir, bin, calls string) {
	t.Helper()
	named := filepath.Join(dir, "ocierofs-as", "mkfs.erofs")
	must(t, os.MkdirAll(filepath.Dir(named), 0o755))
	must(t, os.Symlink(bin, named))
	must(t, os.WriteFile(filepath.Join(dir, "mkfs.erofs"), fmt.Appendf(nil, ocierofsMkfs, strconv.Quote(calls), strconv.Quote(named)), 0o755))
}

// tomlStrings is a TOML array of strings.
func tomlStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// startContainerd starts a containerd with root, state and config in temp
// directories of the test, its sockets in a short directory under /tmp
// (unix socket paths have 108 bytes), and a PATH of only the runc shim,
// runc and the stand-in mkfs.erofs. It stops when the test ends.
func startContainerd(t testing.TB, opt ctrdOptions) *ctrd {
	t.Helper()
	requireContainerdHost(t)
	bin := containerdBinDir(t)
	runc := runcBinary(t)

	dir := t.TempDir()
	sockDir, err := os.MkdirTemp("", "ocierofs-ctrd-")
	must(t, err)
	c := &ctrd{
		bin:       bin,
		addr:      filepath.Join(sockDir, "c.sock"),
		root:      filepath.Join(dir, "root"),
		state:     filepath.Join(dir, "state"),
		sockDir:   sockDir,
		config:    filepath.Join(dir, "config.toml"),
		logPath:   filepath.Join(dir, "containerd.log"),
		mkfsCalls: filepath.Join(dir, "mkfs.erofs-calls"),
		done:      make(chan struct{}),
	}
	pathDir := filepath.Join(dir, "path")
	must(t, os.MkdirAll(pathDir, 0o755))
	must(t, os.Symlink(filepath.Join(bin, "containerd-shim-runc-v2"), filepath.Join(pathDir, "containerd-shim-runc-v2")))
	must(t, os.Symlink(runc, filepath.Join(pathDir, "runc")))
	if opt.mkfs != "" {
		ocierofsAsMkfs(t, pathDir, opt.mkfs, c.mkfsCalls)
	} else {
		must(t, os.WriteFile(filepath.Join(pathDir, "mkfs.erofs"), fmt.Appendf(nil, standInMkfs, strconv.Quote(c.mkfsCalls)), 0o755))
	}
	differs := opt.differs
	if differs == nil {
		differs = []string{"erofs", "walking"}
	}
	dmverity := opt.dmverityMode
	if dmverity == "" {
		dmverity = "auto"
	}
	must(t, os.WriteFile(c.config, fmt.Appendf(nil, ctrdConfig, containerdVersion, c.root, c.state,
		c.addr, c.addr+".ttrpc", filepath.Join(dir, "opt"), tomlStrings(opt.layerContentCaches), dmverity,
		tomlStrings(opt.mkfsOptions), opt.tarIndex, tomlStrings(differs)), 0o644))

	logf, err := os.Create(c.logPath)
	must(t, err)
	c.cmd = exec.Command(filepath.Join(bin, "containerd"), "--config", c.config)
	c.cmd.Env = []string{"PATH=" + pathDir, "HOME=" + dir, "TMPDIR=" + dir}
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("start containerd: %v", err)
	}
	go func() { c.cmd.Wait(); logf.Close(); close(c.done) }()
	t.Cleanup(func() { c.stop(t) })

	// Ready when ctr gets an answer.
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-c.done:
			t.Fatalf("containerd exited at start:\n%s", c.logTail(60))
		default:
		}
		if _, err := c.ctrErr("", "version"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not answer on %s in 30s:\n%s", c.addr, c.logTail(60))
		}
		time.Sleep(100 * time.Millisecond)
	}
	version := c.ctr(t, "", "version")
	if !strings.Contains(version, strings.TrimPrefix(containerdVersion, "v")) {
		t.Logf("warning: the tests are written for containerd %s, this is:\n%s", containerdVersion, version)
	}
	// The EROFS snapshotter and differ must both be up: without the differ
	// containerd would unpack EROFS layers with the walking differ (and fail).
	plugins := c.ctr(t, "", "plugins", "ls")
	for _, want := range []string{"io.containerd.snapshotter.v1", "io.containerd.differ.v1", "io.containerd.mount-handler.v1"} {
		ok := false
		for _, l := range strings.Split(plugins, "\n") {
			if f := strings.Fields(l); len(f) >= 4 && f[0] == want && f[1] == "erofs" && f[len(f)-1] == "ok" {
				ok = true
			}
		}
		if !ok {
			t.Fatalf("containerd has no working %s erofs plugin:\n%s\nlog:\n%s", want, plugins, c.logTail(60))
		}
	}
	t.Logf("containerd %s up in %.2fs (root %s, socket %s)", containerdVersion, time.Since(start).Seconds(), c.root, c.addr)
	return c
}

// stop ends containerd and its shims, and unmounts what they left.
func (c *ctrd) stop(t testing.TB) {
	// Containers a failed test left running: killed and deleted while
	// containerd can still do it (a shim killed below would leave the
	// container's processes behind).
	for ns := range c.namespaces {
		out, _, err := c.ctrStreams(ns, "task", "ls", "-q")
		if err != nil {
			continue
		}
		for _, id := range strings.Fields(out) {
			c.ctrErr(ns, "task", "kill", "-s", "SIGKILL", id)
			c.ctrErr(ns, "task", "delete", "--force", id)
			c.ctrErr(ns, "container", "delete", id)
		}
	}
	if c.cmd.Process != nil {
		c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(15 * time.Second):
			c.cmd.Process.Kill()
			<-c.done
		}
	}
	// Shims of containers still running (a test failed in the middle) are
	// children of init now: find them by their -address argument.
	if ents, err := os.ReadDir("/proc"); err == nil {
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err == nil && bytes.Contains(cmdline, []byte("containerd-shim")) && bytes.Contains(cmdline, []byte(c.addr)) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	// Unmount everything under root, state and the socket directory,
	// deepest first.
	var mnts []string
	if f, err := os.Open("/proc/self/mountinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 5 {
				continue
			}
			mp := mountinfo.Unescape(fields[4])
			for _, d := range []string{c.root, c.state, c.sockDir} {
				if mp == d || strings.HasPrefix(mp, d+"/") {
					mnts = append(mnts, mp)
				}
			}
		}
		f.Close()
	}
	slices.SortFunc(mnts, func(a, b string) int { return len(b) - len(a) })
	for _, m := range mnts {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			t.Logf("umount %s: %v", m, err)
		}
	}
	os.RemoveAll(c.sockDir)
	for ns := range c.namespaces {
		os.Remove(filepath.Join("/run/containerd/runc", ns)) // only if empty: another containerd may use it
	}
}

// logTail is the last n lines of containerd's log.
func (c *ctrd) logTail(n int) string {
	b, _ := os.ReadFile(c.logPath)
	return lastLines(string(b), n)
}

// lastLines is the last n lines of s (ctr pull's progress display repeats
// itself for every update).
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ctrErr runs ctr against this containerd in namespace ns (none if empty)
// and returns its combined output.
func (c *ctrd) ctrErr(ns string, args ...string) (string, error) {
	stdout, stderr, err := c.ctrStreams(ns, args...)
	return stdout + stderr, err
}

// ctrStreams runs ctr and returns its stdout and stderr apart: ctr run
// copies the container's stdout to its own, and logs warnings (the
// deprecation of cgroup v1, say) to stderr.
func (c *ctrd) ctrStreams(ns string, args ...string) (stdout, stderr string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	full := []string{"--address", c.addr}
	if ns != "" {
		full = append(full, "--namespace", ns)
		if c.namespaces == nil {
			c.namespaces = map[string]bool{}
		}
		c.namespaces[ns] = true
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "ctr"), full...)
	path := "/nonexistent"
	if c.ctrPath != "" {
		path = c.ctrPath
	}
	cmd.Env = []string{"PATH=" + path, "HOME=" + c.sockDir}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (killed after 2 minutes)", err)
	}
	return o.String(), e.String(), err
}

// ctr runs ctr and returns its stdout; an error fails the test, with
// ctr's stderr and containerd's log.
func (c *ctrd) ctr(t testing.TB, ns string, args ...string) string {
	t.Helper()
	out, stderr, err := c.ctrStreams(ns, args...)
	if err != nil {
		t.Fatalf("ctr %s: %v\nstdout (end):\n%s\nstderr:\n%s\ncontainerd log:\n%s", strings.Join(args, " "), err, lastLines(out, 15), stderr, c.logTail(40))
	}
	return out
}

// mkfsCallsSoFar is what the stand-in mkfs.erofs recorded: one line per
// call but --help.
func (c *ctrd) mkfsCallsSoFar() string {
	b, err := os.ReadFile(c.mkfsCalls)
	if err != nil {
		return ""
	}
	return string(b)
}

// requireNoMkfs fails the test if containerd ran mkfs.erofs.
func (c *ctrd) requireNoMkfs(t testing.TB) {
	t.Helper()
	if calls := c.mkfsCallsSoFar(); calls != "" {
		t.Errorf("containerd ran mkfs.erofs (it converted a layer on the node):\n%s", calls)
	}
}

// snapshotInfo is what `ctr snapshots info` prints.
type snapshotInfo struct {
	Kind   string
	Name   string
	Parent string
	Labels map[string]string
}

func (c *ctrd) snapshot(t testing.TB, ns, key string) snapshotInfo {
	t.Helper()
	out := c.ctr(t, ns, "snapshots", "--snapshotter", "erofs", "info", key)
	var si snapshotInfo
	if err := json.Unmarshal([]byte(out), &si); err != nil {
		t.Fatalf("ctr snapshots info %s: %v\n%s", key, err, out)
	}
	return si
}

// chainIDs are the snapshot names of a stack of layers (OCI image spec:
// ChainID(L0) = DiffID(L0), ChainID(Ln) = sha256(ChainID(Ln-1) + " " + DiffID(Ln))).
func chainIDs(diffIDs []v1.Hash) []string {
	var out []string
	for i, d := range diffIDs {
		if i == 0 {
			out = append(out, d.String())
			continue
		}
		s := sha256.Sum256([]byte(out[i-1] + " " + d.String()))
		out = append(out, "sha256:"+hex.EncodeToString(s[:]))
	}
	return out
}

// erofsLayerBlobs hashes every snapshots/<id>/layer.erofs of the EROFS
// snapshotter: the set of layer images containerd mounts from its own
// directory.
func (c *ctrd) erofsLayerBlobs(t testing.TB) map[string]string {
	t.Helper()
	got := map[string]string{}
	files, err := filepath.Glob(filepath.Join(c.root, "io.containerd.snapshotter.v1.erofs", "snapshots", "*", "layer.erofs"))
	must(t, err)
	for _, f := range files {
		fi, err := os.Lstat(f)
		must(t, err)
		if !fi.Mode().IsRegular() {
			got[f] = "not a regular file: " + fi.Mode().String()
			continue
		}
		b, err := os.ReadFile(f)
		must(t, err)
		got[f] = convtest.SHA256(b).String()
	}
	return got
}

// ---------------------------------------------------------------------------
// The image containers run.

// busyboxApplets get a link in /bb of the test image.
var busyboxApplets = []string{"sh", "cat", "ls", "stat", "readlink", "echo", "test", "sha256sum", "sleep", "wc", "tr", "sort", "head"}

// busyboxLayer is a layer with /bb/busybox (static) and links to it.
func busyboxLayer(t testing.TB) v1.Layer {
	t.Helper()
	entries := []convtest.Entry{convtest.Dir(".", 0o755), convtest.Dir("bb", 0o755), convtest.File("bb/busybox", 0o755, staticBusybox(t))}
	for _, a := range busyboxApplets {
		entries = append(entries, convtest.Symlink("bb/"+a, "busybox"))
	}
	return convtest.Layer(t, entries...)
}

// runnableImage is the test image of convtest.TestImageLayers with a busybox layer
// at the bottom, and /bb/sh -c as its entrypoint: convtest.TestImageLayers's own
// /bin/sh is a script that cannot run.
func runnableImage(t testing.TB, arch string) v1.Image {
	t.Helper()
	return runnableImageOf(t, arch, append([]v1.Layer{busyboxLayer(t)}, convtest.TestImageLayers(t)...))
}

// runnableImageOf is runnableImage with other layers.
func runnableImageOf(t testing.TB, arch string, layers []v1.Layer) v1.Image {
	t.Helper()
	img := convtest.Image(t, arch, layers...)
	cf, err := img.ConfigFile()
	must(t, err)
	cf = cf.DeepCopy()
	cf.Config.Entrypoint = []string{"/bb/sh", "-c"}
	cf.Config.Cmd = []string{"echo hello"}
	cf.Config.Env = []string{"PATH=/bb", "E2E=1"}
	cf.Config.WorkingDir = "/"
	img, err = mutate.ConfigFile(img, cf)
	must(t, err)
	return img
}

// containerScript runs in the container (ctr run IMAGE ID /bb/sh -c
// SCRIPT). Its output is containerWant, exactly.
const containerScript = `
echo "bb $(readlink /bb/sh)"
echo "--- layer 1"
cat /etc/passwd /etc/shadow /etc/apt/sources.list /opt/keep /home/user/.profile /bin/sh
echo "abs -> $(readlink /bin/abs)"
echo "big $(sha256sum /bin/big | head -c 64) $(wc -c < /bin/big)"
echo "--- layer 2"
cat /opt/added
for p in /etc/motd /opt/legacy /opt/legacy/tool /bin/ls; do
	if test -e "$p" || test -L "$p"; then echo "present $p"; else echo "gone $p"; fi
done
ls -A /opt | tr '\n' ' '; echo
echo "--- layer 3"
echo "var/cache/app: $(ls -A /var/cache/app | tr '\n' ' ')"
cat /var/cache/app/new.dat /usr/local/bin/hello
stat -c '%h %i' /usr/local/bin/hello /usr/local/bin/hello-link /usr/local/hello-too | sort -u | wc -l
stat -c '%h %n' /usr/local/bin/hello-link
echo "--- layer 4"
cat /etc/apt/apt.conf /home/user/.history /var/cache/app/late.dat
echo "--- modes"
stat -c '%a %u %g %F %n' /usr/local/bin/suid /usr/local/bin/sgid /usr/local/bin/ping /etc/apt /etc/shadow /home/user /var/cache/app /tmp /root /bin/sh
echo "--- env"
echo "E2E=$E2E cwd=$(pwd)"
`

// containerWant is what containerScript prints in a container of
// runnableImage.
func containerWant() string {
	bigSum := sha256.Sum256(convtest.RandomBytes(1, 300<<10+123))
	return `bb busybox
--- layer 1
root:x:0:0:root:/root:/bin/sh
user:x:1000:1000::/home/user:/bin/sh
root:*:19000:0:99999:7:::
deb http://deb.debian.org/debian bookworm main
stays
export PS1='$ '
#!/bin/false
# not a shell
abs -> /etc/passwd
big ` + hex.EncodeToString(bigSum[:]) + ` ` + strconv.Itoa(300<<10+123) + `
--- layer 2
added by layer 2
gone /etc/motd
gone /opt/legacy
gone /opt/legacy/tool
gone /bin/ls
added keep 
--- layer 3
var/cache/app: late.dat new.dat 
only this survives in var/cache/app
#!/bin/sh
echo hello from layer 3
1
3 /usr/local/bin/hello-link
--- layer 4
APT::Install-Recommends "false";
ls
added by layer 4
--- modes
4755 0 0 regular file /usr/local/bin/suid
2755 0 50 regular file /usr/local/bin/sgid
755 0 0 regular file /usr/local/bin/ping
750 0 0 directory /etc/apt
640 0 42 regular file /etc/shadow
700 1000 1000 directory /home/user
755 1000 1000 directory /var/cache/app
1777 0 0 directory /tmp
700 0 0 directory /root
755 0 0 regular file /bin/sh
--- env
E2E=1 cwd=/
`
}

// runContainer runs containerScript in a container of image (ctr run --rm)
// and compares its output with containerWant. A container that does not
// run fails the test with what ctr, runc and containerd said.
func (c *ctrd) runContainer(t testing.TB, ns, image string, extra ...string) {
	t.Helper()
	id := "script-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	args := append([]string{"run", "--rm", "--snapshotter", "erofs"}, extra...)
	// ctr run's arguments replace the image's entrypoint and cmd both.
	args = append(args, image, id, "/bb/sh", "-c", containerScript)
	start := time.Now()
	out, stderr, err := c.ctrStreams(ns, args...)
	if err != nil {
		t.Fatalf("containerd could not run a container of %s: ctr run: %v\nstdout:\n%s\nstderr:\n%s\ncontainerd log:\n%s",
			image, err, out, stderr, c.logTail(40))
	}
	t.Logf("ctr run --rm %s: %.2fs", image, time.Since(start).Seconds())
	if want := containerWant(); out != want {
		t.Errorf("the container printed:\n%s\nwant:\n%s\ndiff: %s\nctr's stderr:\n%s", out, want, firstLineDiff(out, want), stderr)
	}
}

func firstLineDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: got %q, want %q", i+1, gl, wl)
		}
	}
	return "none"
}

// inspectRunning starts a container of image that sleeps, and compares
// its root filesystem, as the container sees it (/proc/PID/root), with
// umoci's unpacking of src: types, modes, owners, mtimes, contents, link
// targets, device numbers, xattrs and hard links of every file, but for
// the mount points of the runtime (/dev, /proc, /sys, /run) and the root
// directory itself (runc makes those mount points in the upper directory).
// It also reads the xattrs of the test image by name.
func (c *ctrd) inspectRunning(t testing.TB, ns, image string, src v1.Image, extra ...string) {
	t.Helper()
	id := "sleeper-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	args := append([]string{"run", "-d", "--snapshotter", "erofs"}, extra...)
	c.ctr(t, ns, append(args, image, id, "/bb/sleep", "600")...)
	defer func() {
		c.ctrErr(ns, "task", "kill", "-s", "SIGKILL", id)
		for i := 0; i < 50; i++ {
			if _, err := c.ctrErr(ns, "task", "delete", id); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.ctrErr(ns, "container", "delete", id)
	}()
	var pid int
	for _, l := range strings.Split(c.ctr(t, ns, "task", "ls"), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == id {
			pid, _ = strconv.Atoi(f[1])
		}
	}
	if pid == 0 {
		t.Fatalf("no task %s in ctr task ls", id)
	}
	root := fmt.Sprintf("/proc/%d/root", pid)
	// The tree is read from the bundle's rootfs, the mount runc made the
	// container's root: the same filesystem, seen from the host, without
	// the mounts runc adds inside the container (fstree.FromDir resolves
	// symlinks, and /proc/PID/root reads as "/").
	rootfs := filepath.Join(c.state, "io.containerd.runtime.v2.task", ns, id, "rootfs")
	if !isMountPoint(rootfs) {
		t.Fatalf("%s is not a mount point: where did containerd mount the container's root?", rootfs)
	}

	// The xattrs, by name (listxattr through overlayfs hides trusted.overlay.*).
	for _, x := range []struct{ path, name, want string }{
		{"usr/local/bin/ping", "security.capability", convtest.CapNetRaw},
		{"usr/local/bin/ping", "user.e2e.origin", "layer3"},
		{"usr/local/bin/tagged", "user.e2e.a", "1"},
		{"usr/local/bin/tagged", "user.e2e.b", strings.Repeat("v", 300)},
		{"usr/local/bin", "user.e2e.dir", "bin"},
		{"etc/apt", "user.e2e.dir", "apt"},
		{"home/user", "user.e2e.home", "layer3"},
	} {
		buf := make([]byte, 4096)
		n, err := unix.Lgetxattr(filepath.Join(root, x.path), x.name, buf)
		if err != nil {
			t.Errorf("container %s: getxattr %s: %v", x.path, x.name, err)
			continue
		}
		if got := string(buf[:n]); got != x.want {
			t.Errorf("container %s: xattr %s = %q, want %q", x.path, x.name, got, x.want)
		}
	}
	for _, gone := range []string{"etc/motd", "opt/legacy", "bin/ls", "var/cache/app/old.dat", "var/cache/app/olddir"} {
		if _, err := os.Lstat(filepath.Join(root, gone)); err == nil || !os.IsNotExist(err) {
			t.Errorf("container: %s should not exist: lstat: %v", gone, err)
		}
	}

	compareRootfs(t, "container", rootfs, src)
	t.Logf("(the container is task %d)", pid)
}

// compareRootfs compares a root filesystem (a container's, or a stack of
// layer images) with umoci's unpack of src.
func compareRootfs(t testing.TB, what, rootfs string, src v1.Image) {
	t.Helper()
	want := convtest.UmociRootfs(t, src)
	tops, err := os.ReadDir(want)
	must(t, err)
	compared, links := 0, 0
	for _, e := range tops {
		switch e.Name() {
		case "dev", "proc", "sys", "run":
			continue
		}
		w := convtest.TreeFromDir(t, filepath.Join(want, e.Name()))
		g := convtest.TreeFromDir(t, filepath.Join(rootfs, e.Name()))
		diffs := fstree.Diff(w, g, fstree.DiffOptions{
			Ignore: func(p, field string) bool {
				return strings.HasPrefix(field, "xattr:trusted.overlay.") || field == "xattr:user.rootlesscontainers"
			},
		})
		convtest.ReportDiff(t, what+" /"+e.Name()+" vs umoci unpack", diffs)
		compared += g.Len()
		links += len(g.LinkGroups())
	}
	t.Logf("%s (%s) vs umoci unpack: %d paths, %d hard-link groups compared", what, rootfs, compared, links)
	if compared < 40 {
		t.Errorf("only %d paths compared", compared)
	}
}

// isMountPoint reports whether dir is a mount point in this mount
// namespace.
func isMountPoint(dir string) bool {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fields := strings.Fields(sc.Text()); len(fields) >= 5 && mountinfo.Unescape(fields[4]) == dir {
			return true
		}
	}
	return false
}
