package main

// End-to-end tests of ocierofs mount: a converted image in a real registry
// (Debian's docker-registry on loopback), mounted through the kernel's FUSE
// and overlayfs, compared with its layers mounted as EROFS by the kernel,
// run by runc, and read while the registry stalls.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/mount"
)

// requireLazyMount skips where the kernel's FUSE cannot be used, and
// where mounting needs a root this test does not have.
func requireLazyMount(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("mounts a registry image: not in -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("mount needs root")
	}
	if err := mount.Available(); err != nil {
		t.Skip(err)
	}
}

// dockerRegistry starts Debian's docker-registry on 127.0.0.1 for the
// test and returns its host:port.
func dockerRegistry(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no docker-registry (Debian package docker-registry)")
		}
		t.Skip("no docker-registry (Debian package docker-registry)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	host := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n", dir, host)
	must(t, os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o644))
	cmd := exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + host + "/v2/"); err == nil {
			resp.Body.Close()
			return host
		}
	}
	t.Fatalf("docker-registry did not answer: %s", logs.String())
	return ""
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// stallProxy forwards to a registry; while stall is set it holds every
// blob GET until the client gives up.
type stallProxy struct {
	host  string
	stall atomic.Bool
	gets  atomic.Int64
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	p := &stallProxy{}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			p.gets.Add(1)
			if p.stall.Load() {
				<-r.Context().Done()
				return
			}
		}
		rp.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	p.host = l.Addr().String()
	return p
}

// mountProc is a running ocierofs mount.
type mountProc struct {
	cmd    *exec.Cmd
	target string
	stderr *lockedBuffer
	done   chan error
}

type lockedBuffer struct {
	mu chan struct{}
	b  bytes.Buffer
}

func newLockedBuffer() *lockedBuffer { return &lockedBuffer{mu: make(chan struct{}, 1)} }

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	return l.b.String()
}

// startMount runs ocierofs mount ARGS… MOUNTPOINT and waits until it says
// the image is mounted.
func startMount(t *testing.T, b string, args ...string) *mountProc {
	t.Helper()
	target := args[len(args)-1]
	m := &mountProc{target: target, stderr: newLockedBuffer(), done: make(chan error, 1)}
	m.cmd = exec.Command(b, append([]string{"mount"}, args...)...)
	m.cmd.Stderr = m.stderr
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	must(t, m.cmd.Start())
	go func() { m.done <- m.cmd.Wait() }()
	t.Cleanup(func() {
		if m.cmd.ProcessState == nil {
			m.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-m.done:
			case <-time.After(10 * time.Second):
				m.cmd.Process.Kill()
			}
		}
		unix.Unmount(target, unix.MNT_DETACH)
	})
	deadline := time.After(60 * time.Second)
	for !strings.Contains(m.stderr.String(), "mounted ") {
		select {
		case err := <-m.done:
			t.Fatalf("ocierofs mount exited: %v: %s", err, m.stderr.String())
		case <-deadline:
			t.Fatalf("ocierofs mount did not mount in 60s: %s", m.stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
	}
	return m
}

// wait waits for the mount process to end and returns its error.
func (m *mountProc) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-m.done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("ocierofs mount still runs 30s after it was told to stop: %s", m.stderr.String())
		return nil
	}
}

// kernelTree fetches the layers of ref, mounts each as EROFS, stacks them
// with overlayfs and returns the tree: what the lazy mount must show.
func kernelTree(t *testing.T, ref string) *fstree.Tree {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	must(t, err)
	img, err := remote.Image(r)
	must(t, err)
	layers, err := img.Layers()
	must(t, err)
	var lowers []string
	for i, l := range layers {
		rc, err := l.Compressed()
		must(t, err)
		p := filepath.Join(t.TempDir(), fmt.Sprintf("layer%d.erofs", i))
		f, err := os.Create(p)
		must(t, err)
		_, err = io.Copy(f, rc)
		must(t, err)
		rc.Close()
		f.Close()
		d := t.TempDir()
		if out, err := exec.Command("mount", "-t", "erofs", "-o", "loop,ro", p, d).CombinedOutput(); err != nil {
			t.Skipf("cannot mount EROFS: %v: %s", err, out)
		}
		t.Cleanup(func() { unix.Unmount(d, 0) })
		lowers = append([]string{d}, lowers...)
	}
	merged := t.TempDir()
	if len(lowers) == 1 {
		merged = lowers[0]
	} else {
		if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", "lowerdir="+strings.Join(lowers, ":"), merged).CombinedOutput(); err != nil {
			t.Fatalf("mount overlay: %v: %s", err, out)
		}
		t.Cleanup(func() { unix.Unmount(merged, 0) })
	}
	tree, err := fstree.FromDir(merged)
	must(t, err)
	return tree
}

// convertBusyboxTo converts testdata/busybox into the registry at host.
func convertBusyboxTo(t *testing.T, b, host string, extra ...string) string {
	t.Helper()
	ref := host + "/busybox:erofs"
	args := append([]string{"convert", "--plain-http", "-q"}, extra...)
	args = append(args, "oci:"+copyBusyboxLayout(t)+":latest", ref)
	if _, stderr, code := run(t, b, args...); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, stderr)
	}
	return ref
}

// TestMountRegistry: ocierofs mount of a converted image in a registry
// shows the tree that the kernel's EROFS mounts of its layers, stacked by
// overlayfs, show; fetches a part of the image by then; runs a container
// with runc; and umount stops it and leaves nothing mounted.
func TestMountRegistry(t *testing.T) {
	requireLazyMount(t)
	b := bin(t)
	host := dockerRegistry(t)
	ref := convertBusyboxTo(t, b, host)
	want := kernelTree(t, ref)

	cache := t.TempDir()
	target := t.TempDir()
	record := filepath.Join(t.TempDir(), "record")
	m := startMount(t, b, "--plain-http", "--cache-dir", cache, "--record", record, ref, target)
	st, err := os.Stat(filepath.Join(target, "bin"))
	if err != nil || !st.IsDir() {
		t.Fatalf("bin: %v", err)
	}

	runcContainer(t, target)
	got, err := fstree.FromDir(target)
	must(t, err)
	for _, d := range fstree.Diff(want, got, fstree.DiffOptions{Want: "kernel EROFS", Got: "ocierofs mount"}) {
		t.Error(d)
	}

	// A second mount of the image shares the cache: it fetches nothing.
	target2 := t.TempDir()
	m2 := startMount(t, b, "--plain-http", "--cache-dir", cache, "--prefetch", "all", ref, target2)
	got2, err := fstree.FromDir(target2)
	must(t, err)
	for _, d := range fstree.Diff(want, got2, fstree.DiffOptions{Want: "kernel EROFS", Got: "second mount"}) {
		t.Error(d)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(m2.stderr.String(), "fetched and checked") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if _, stderr, code := run(t, b, "umount", target2); code != 0 {
		t.Fatalf("umount: %d %s", code, stderr)
	}
	must(t, m2.wait(t))
	if !strings.Contains(m2.stderr.String(), "fetched and checked") {
		t.Errorf("--prefetch all did not check the layers: %s", m2.stderr.String())
	}

	if _, stderr, code := run(t, b, "umount", target); code != 0 {
		t.Fatalf("umount: exit %d: %s", code, stderr)
	}
	if err := m.wait(t); err != nil {
		t.Fatalf("ocierofs mount: %v: %s", err, m.stderr.String())
	}
	if isMountPoint(target) {
		t.Fatal("still mounted after umount")
	}
	if _, err := os.Stat(mountState(target)); !os.IsNotExist(err) {
		t.Errorf("run directory %s left behind (%v)", mountState(target), err)
	}
	t.Log(m.stderr.String())
	rec, err := os.ReadFile(record)
	must(t, err)
	if !bytes.Contains(rec, []byte("/bin/")) {
		t.Errorf("--record wrote %q, without the shell runc ran", rec)
	}
	if _, _, code := run(t, b, "umount", target); code == 0 {
		t.Error("umount of what is not mounted succeeded")
	}
}

// runcContainer runs sh in a container whose rootfs is the lazy mount
// under a writable overlay, as containerd gives a container its snapshot.
func runcContainer(t *testing.T, lower string) {
	t.Helper()
	runc, err := exec.LookPath("runc")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("no runc (Debian package runc, in make test-deps)")
		}
		t.Skip("no runc (Debian package runc)")
	}
	bundle := t.TempDir()
	rootfs := filepath.Join(bundle, "rootfs")
	up, work := filepath.Join(bundle, "upper"), filepath.Join(bundle, "work")
	for _, d := range []string{rootfs, up, work} {
		must(t, os.Mkdir(d, 0o755))
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, up, work)
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", opts, rootfs).CombinedOutput(); err != nil {
		t.Fatalf("mount overlay over the lazy mount: %v: %s", err, out)
	}
	defer unix.Unmount(rootfs, unix.MNT_DETACH)
	if out, err := exec.Command(runc, "spec", "--bundle", bundle).CombinedOutput(); err != nil {
		t.Fatalf("runc spec: %v: %s", err, out)
	}
	var spec map[string]any
	raw, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	must(t, err)
	must(t, json.Unmarshal(raw, &spec))
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{"/bin/sh", "-c", "echo hello from $(cat /etc/hostname 2>/dev/null || echo lazy) && ls /bin | wc -l"}
	raw, err = json.Marshal(spec)
	must(t, err)
	must(t, os.WriteFile(filepath.Join(bundle, "config.json"), raw, 0o644))
	id := fmt.Sprintf("ocierofs-lazy-%d", os.Getpid())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, runc, "run", "--bundle", bundle, id)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		exec.Command(runc, "delete", "-f", id).Run()
		t.Fatalf("runc run: %v: %s %s", err, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "hello from") {
		t.Fatalf("runc run printed %q", out.String())
	}
	t.Logf("container: %s", strings.TrimSpace(out.String()))
}

// TestMountStall: while the registry stalls, a read fails with EIO within
// the read timeout instead of hanging; once it answers again, the same
// read succeeds on the same mount.
func TestMountStall(t *testing.T) {
	requireLazyMount(t)
	b := bin(t)
	host := dockerRegistry(t)
	ref := convertBusyboxTo(t, b, host)
	proxy := newStallProxy(t, host)
	ref = strings.Replace(ref, host, proxy.host, 1)
	target := t.TempDir()
	m := startMount(t, b, "--plain-http", "--cache-dir", t.TempDir(), "--read-timeout", "4s", "--stall-timeout", "1s", ref, target)
	proxy.stall.Store(true)
	before := proxy.gets.Load()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sh", "-c", "cat "+target+"/bin/busybox | wc -c").CombinedOutput()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatal("a read of a stalled registry hung for 60s")
	}
	if !strings.Contains(string(out), "Input/output error") {
		t.Fatalf("read while the registry stalls: %v: %s", err, out)
	}
	if took > 30*time.Second {
		t.Errorf("a stalled read took %s to fail, bound 4s per FUSE request", took)
	}
	if n := proxy.gets.Load() - before; n < 2 {
		t.Errorf("%d blob requests while stalled: want retries", n)
	}
	t.Logf("stalled read failed after %s: %s", took, bytes.TrimSpace(out))

	proxy.stall.Store(false)
	out, err = exec.Command("sh", "-c", "cat "+target+"/bin/busybox | wc -c").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) == "0" || strings.Contains(string(out), "error") {
		t.Fatalf("read after the stall: %v: %s", err, out)
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	if err := m.wait(t); err != nil {
		t.Fatalf("ocierofs mount after SIGTERM: %v: %s", err, m.stderr.String())
	}
	if isMountPoint(target) {
		t.Fatal("still mounted after SIGTERM")
	}
}

// TestMountLayoutZstd: a layout's +zstd layers are fetched whole, with a
// message saying why, and show the kernel's tree.
func TestMountLayoutZstd(t *testing.T) {
	requireLazyMount(t)
	b := bin(t)
	host := dockerRegistry(t)
	ref := convertBusyboxTo(t, b, host)
	want := kernelTree(t, ref)
	dir := filepath.Join(t.TempDir(), "layout")
	if _, stderr, code := run(t, b, "convert", "-q", "--layer-compression", "zstd", "oci:"+copyBusyboxLayout(t)+":latest", "oci:"+dir+":z"); code != 0 {
		t.Fatalf("convert: %s", stderr)
	}
	target := t.TempDir()
	m := startMount(t, b, "--cache-dir", t.TempDir(), "oci:"+dir+":z", target)
	got, err := fstree.FromDir(target)
	must(t, err)
	for _, d := range fstree.Diff(want, got, fstree.DiffOptions{Want: "kernel EROFS", Got: "zstd layout mount"}) {
		t.Error(d)
	}
	if !strings.Contains(m.stderr.String(), "no chunk index") {
		t.Errorf("no message on fetching +zstd layers whole: %s", m.stderr.String())
	}
	m.cmd.Process.Signal(syscall.SIGINT)
	must(t, m.wait(t))
}

// TestMountSpecLayoutVectors: the spec vectors of the device and the
// overlay-data layouts, mounted, show the source's layers stacked: the
// device layers are the extra devices of the metadata layer above them,
// not layers of the overlay; the data layer is a data-only lower layer,
// its files read through the metadata layer's redirects, its own tree
// hidden.
func TestMountSpecLayoutVectors(t *testing.T) {
	if testing.Short() || os.Geteuid() != 0 {
		t.Skip("mounts: not in -short, needs root")
	}
	if err := mount.Available(); err != nil {
		t.Skip(err)
	}
	b := bin(t)
	_, want := sourceLayerTrees(t)
	for _, v := range []string{"device", "overlay-data"} {
		t.Run(v, func(t *testing.T) {
			target := t.TempDir()
			m := startMount(t, b, "--cache-dir", t.TempDir(), "oci:"+filepath.Join(specVectorsDir, v)+":latest", target)
			got, err := fstree.FromDir(target)
			must(t, err)
			for _, d := range fstree.Diff(want, got, fstree.DiffOptions{IgnoreImpliedMtime: true, IgnoreRootMeta: true, Want: "source", Got: "mounted"}) {
				t.Error(d)
			}
			m.cmd.Process.Signal(syscall.SIGINT)
			must(t, m.wait(t))
			if strings.Contains(m.stderr.String(), "read:") {
				t.Errorf("reads failed: %s", m.stderr.String())
			}
		})
	}
}

// TestMountErrors: what mount refuses, in one line.
func TestMountErrors(t *testing.T) {
	b := bin(t)
	_, stderr, code := run(t, b, "mount", "oci:/nonexistent", "/nonexistent-dir")
	if code == 0 || !strings.Contains(stderr, "ocierofs: ") {
		t.Fatalf("mount of nothing: exit %d: %s", code, stderr)
	}
	sc := bufio.NewScanner(strings.NewReader(stderr))
	lines := 0
	for sc.Scan() {
		lines++
	}
	if lines != 1 {
		t.Errorf("%d lines of error: %s", lines, stderr)
	}
	if _, stderr, code := run(t, b, "mount", "--prefetch", "some", "oci:/x", t.TempDir()); code == 0 || (!strings.Contains(stderr, "--prefetch") && !strings.Contains(stderr, "FUSE")) {
		t.Errorf("--prefetch some: exit %d: %s", code, stderr)
	}
}

// TestMountLogin: mount logs in as convert does (--username, --password),
// and without them says that the registry wants a login.
func TestMountLogin(t *testing.T) {
	requireLazyMount(t)
	b := bin(t)
	reg := newLoginRegistry(t, "alice", "s3cret")
	ref := reg.host + "/busybox:erofs"
	if _, stderr, code := run(t, b, "convert", "--plain-http", "-q", "--username", "alice", "--password", "s3cret", "oci:"+copyBusyboxLayout(t)+":latest", ref); code != 0 {
		t.Fatalf("convert: %s", stderr)
	}
	target := t.TempDir()
	_, stderr, code := run(t, b, "mount", "--plain-http", "--cache-dir", t.TempDir(), ref, target)
	if code == 0 || !strings.Contains(stderr, "401") && !strings.Contains(strings.ToLower(stderr), "unauthorized") {
		t.Fatalf("mount without a login: exit %d: %s", code, stderr)
	}
	reg.reset()
	m := startMount(t, b, "--plain-http", "--cache-dir", t.TempDir(), "--username", "alice", "--password", "s3cret", ref, target)
	if _, err := os.ReadFile(filepath.Join(target, "bin", "busybox")); err != nil {
		t.Fatal(err)
	}
	reg.mu.Lock()
	reads := reg.blobReads
	reg.mu.Unlock()
	if reads == 0 {
		t.Fatal("no blob read from the registry")
	}
	if u := reg.users(); len(u) != 1 || u[0] != "alice" {
		t.Fatalf("users sent: %v", u)
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	must(t, m.wait(t))
}

// TestMountKilled: what a killed server leaves mounted, umount detaches,
// and a new mount at the same place works.
func TestMountKilled(t *testing.T) {
	requireLazyMount(t)
	b := bin(t)
	host := dockerRegistry(t)
	ref := convertBusyboxTo(t, b, host)
	target := t.TempDir()
	cache := t.TempDir()
	m := startMount(t, b, "--plain-http", "--cache-dir", cache, ref, target)
	m.cmd.Process.Kill()
	m.wait(t)
	if !isMountPoint(target) {
		t.Fatal("the overlay went with the killed server: nothing to test")
	}
	if _, stderr, code := run(t, b, "umount", target); code != 0 {
		t.Fatalf("umount after a kill: exit %d: %s", code, stderr)
	}
	if isMountPoint(target) {
		t.Fatal("still mounted after umount")
	}
	m = startMount(t, b, "--plain-http", "--cache-dir", cache, ref, target)
	m.cmd.Process.Kill()
	m.wait(t)
	m = startMount(t, b, "--plain-http", "--cache-dir", cache, ref, target)
	if _, err := os.ReadFile(filepath.Join(target, "bin", "busybox")); err != nil {
		t.Fatalf("a mount over a killed one: %v", err)
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	must(t, m.wait(t))
}
