package main

// The figures of docs/performance.md, "Lazy mount": an image made of this
// machine's /usr, pushed to docker-registry, converted, then started three
// ways: pulled and unpacked (umoci), its EROFS layers pulled whole and
// mounted by the kernel, and mounted lazily. Run as root:
//
//	OCIEROFS_LAZY_BENCH=1 go test -count=1 -timeout 60m -run '^TestLazyMountFigures$' -v ./cmd/ocierofs
//
// OCIEROFS_LAZY_BENCH_LINK=25ms,100 puts a link of 25 ms per request and
// 100 Mbit/s between the clients and the registry (default: loopback).
// OCIEROFS_LAZY_BENCH_ONLY=variants measures only the lazy mounts of the
// image converted in other forms: the spec's +zstd layers with an
// embedded chunk index, and layers laid out for a prefetch list (recorded
// over a first mount running the workload).
// OCIEROFS_LAZY_BENCH_RUN is that workload, run in a chroot of the mount
// and timed as the first run (default: /bin/sh -c true).

import (
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/sys/unix"
)

// linkProxy forwards to a registry through a simulated link: a delay per
// request and a shared bandwidth; it counts the blob bytes sent.
type linkProxy struct {
	host    string
	delay   time.Duration
	bps     float64 // bytes per second; 0: unbounded
	mu      sync.Mutex
	next    time.Time
	blobOut atomic.Int64
	blobReq atomic.Int64
}

func newLinkProxy(t *testing.T, target string, delay time.Duration, mbit float64) *linkProxy {
	p := &linkProxy{delay: delay, bps: mbit * 1e6 / 8}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(p.delay)
		if strings.Contains(r.URL.Path, "/blobs/sha256:") {
			p.blobReq.Add(1)
		}
		rp.ServeHTTP(&linkWriter{ResponseWriter: w, p: p, blob: strings.Contains(r.URL.Path, "/blobs/sha256:")}, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	p.host = l.Addr().String()
	return p
}

type linkWriter struct {
	http.ResponseWriter
	p    *linkProxy
	blob bool
}

func (w *linkWriter) Write(b []byte) (int, error) {
	if w.blob {
		w.p.blobOut.Add(int64(len(b)))
	}
	if w.p.bps > 0 {
		w.p.mu.Lock()
		start := time.Now()
		if w.p.next.After(start) {
			start = w.p.next
		}
		w.p.next = start.Add(time.Duration(float64(len(b)) / w.p.bps * float64(time.Second)))
		until := w.p.next
		w.p.mu.Unlock()
		time.Sleep(time.Until(until))
	}
	return w.ResponseWriter.Write(b)
}

func (w *linkWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// evictPageCache drops the page cache of every file under dir, so that the
// next read comes from the disk (or, through FUSE, from the server).
func evictPageCache(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if f, err := os.Open(p); err == nil {
				unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
				f.Close()
			}
		}
		return nil
	})
}

func timeCmd(t *testing.T, name string, args ...string) time.Duration {
	t.Helper()
	start := time.Now()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %q: %v: %s", name, args, err, out)
	}
	return time.Since(start)
}

func catAll(t *testing.T, root string) time.Duration {
	return timeCmd(t, "sh", "-c", "cd "+root+" && find . -xdev -type f -print0 | xargs -0 -n 256 cat > /dev/null")
}

func TestLazyMountFigures(t *testing.T) {
	if os.Getenv("OCIEROFS_LAZY_BENCH") == "" {
		t.Skip("figures for docs/performance.md: set OCIEROFS_LAZY_BENCH=1")
	}
	requireLazyMount(t)
	b := bin(t)
	reg := dockerRegistry(t)
	delay, mbit := time.Duration(0), 0.0
	if l := os.Getenv("OCIEROFS_LAZY_BENCH_LINK"); l != "" {
		d, m, _ := strings.Cut(l, ",")
		var err error
		delay, err = time.ParseDuration(d)
		must(t, err)
		mbit, err = strconv.ParseFloat(m, 64)
		must(t, err)
	}
	proxy := newLinkProxy(t, reg, delay, mbit)
	host := proxy.host

	// The source image: a Debian-like root of two gzip layers.
	work := t.TempDir()
	parts := [][]string{
		{"etc", "bin", "sbin", "lib", "lib64", "usr/bin", "usr/sbin", "usr/lib64", "usr/lib/x86_64-linux-gnu"},
		{"usr/lib/python3", "usr/lib/python3.11"},
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	for i, p := range parts {
		tarPath := filepath.Join(work, fmt.Sprintf("layer%d.tar", i))
		args := append([]string{"--numeric-owner", "--xattrs", "-C", "/", "-cf", tarPath}, p...)
		if out, err := exec.Command("tar", args...).CombinedOutput(); err != nil && !strings.Contains(string(out), "socket ignored") {
			t.Logf("tar: %v: %s", err, out)
		}
		l, err := tarball.LayerFromFile(tarPath, tarball.WithMediaType(types.OCILayer))
		must(t, err)
		img, err = mutate.AppendLayers(img, l)
		must(t, err)
	}
	cf, err := img.ConfigFile()
	must(t, err)
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	img, err = mutate.ConfigFile(img, cf)
	must(t, err)
	src := host + "/bench/root:src"
	srcRef, err := name.ParseReference(src, name.Insecure)
	must(t, err)
	must(t, remote.Write(srcRef, img))
	dst := host + "/bench/root:erofs"
	if _, stderr, code := run(t, b, "convert", "--plain-http", "-q", src, dst); code != 0 {
		t.Fatalf("convert: %s", stderr)
	}
	var gzSize, erofsSize, rawSize int64
	ls, _ := img.Layers()
	for _, l := range ls {
		n, _ := l.Size()
		gzSize += n
	}
	dstRef, _ := name.ParseReference(dst, name.Insecure)
	cimg, err := remote.Image(dstRef)
	must(t, err)
	cls, _ := cimg.Layers()
	for _, l := range cls {
		n, _ := l.Size()
		erofsSize += n
	}
	for i := range parts {
		fi, _ := os.Stat(filepath.Join(work, fmt.Sprintf("layer%d.tar", i)))
		rawSize += fi.Size()
	}
	t.Logf("image: %d layers, tar %d MiB, gzip %d MiB, EROFS %d MiB; link: %s per request, %.0f Mbit/s (0: loopback)",
		len(parts), rawSize>>20, gzSize>>20, erofsSize>>20, delay, mbit)

	if os.Getenv("OCIEROFS_LAZY_BENCH_ONLY") == "variants" {
		lazyVariants(t, b, host, src, dst, work, proxy)
		return
	}

	// 2. Pull the EROFS layers whole, mount them, stack them.
	{
		proxy.blobOut.Store(0)
		start := time.Now()
		var lowers, files []string
		for i, l := range cls {
			rc, err := l.Compressed()
			must(t, err)
			p := filepath.Join(work, fmt.Sprintf("c%d.erofs", i))
			f, err := os.Create(p)
			must(t, err)
			_, err = io.Copy(f, rc)
			must(t, err)
			rc.Close()
			f.Close()
			files = append(files, p)
			d := t.TempDir()
			if out, err := exec.Command("mount", "-t", "erofs", "-o", "loop,ro", p, d).CombinedOutput(); err != nil {
				t.Fatalf("mount: %v: %s", err, out)
			}
			t.Cleanup(func() { unix.Unmount(d, 0) })
			lowers = append([]string{d}, lowers...)
		}
		merged := t.TempDir()
		if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", "lowerdir="+strings.Join(lowers, ":"), merged).CombinedOutput(); err != nil {
			t.Fatalf("overlay: %v: %s", err, out)
		}
		t.Cleanup(func() { unix.Unmount(merged, 0) })
		timeCmd(t, "chroot", merged, "/bin/sh", "-c", "true")
		first := time.Since(start)
		fetched := proxy.blobOut.Load()
		unix.Unmount(merged, 0)
		for _, d := range lowers {
			unix.Unmount(d, 0)
		}
		for _, f := range files {
			evictPageCache(f)
		}
		for i, f := range files {
			if out, err := exec.Command("mount", "-t", "erofs", "-o", "loop,ro", f, lowers[len(lowers)-1-i]).CombinedOutput(); err != nil {
				t.Fatalf("mount: %v: %s", err, out)
			}
		}
		if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", "lowerdir="+strings.Join(lowers, ":"), merged).CombinedOutput(); err != nil {
			t.Fatalf("overlay: %v: %s", err, out)
		}
		cold := catAll(t, merged)
		warm := catAll(t, merged)
		t.Logf("| pull EROFS layers + kernel mount | %.1f s | %d MiB (%.0f%% of EROFS) | %.1f s | %.1f s |", first.Seconds(), fetched>>20, 100*float64(fetched)/float64(erofsSize), cold.Seconds(), warm.Seconds())
	}

	// 3. ocierofs mount: lazy, with an empty chunk cache.
	cache := filepath.Join(work, "chunks")
	for _, round := range []string{"lazy mount, empty cache", "lazy mount again, chunks on disk"} {
		proxy.blobOut.Store(0)
		target := t.TempDir()
		start := time.Now()
		m := startMount(t, b, "--plain-http", "--cache-dir", cache, "--cache-size", "20G", dst, target)
		timeCmd(t, "chroot", target, "/bin/sh", "-c", "true")
		first := time.Since(start)
		fetched := proxy.blobOut.Load()
		if round != "lazy mount, empty cache" {
			evictPageCache(cache)
		}
		cold := catAll(t, target)
		warm := catAll(t, target)
		t.Logf("| %s | %.1f s | %.1f MiB (%.1f%% of EROFS) | %.1f s | %.1f s |", round, first.Seconds(), float64(fetched)/(1<<20), 100*float64(fetched)/float64(erofsSize), cold.Seconds(), warm.Seconds())
		if _, stderr, code := run(t, b, "umount", target); code != 0 {
			t.Fatalf("umount: %s", stderr)
		}
		must(t, m.wait(t))
	}

	// 1. Pull (gzip layers) and unpack with umoci, then sh -c true.
	if _, err := exec.LookPath("umoci"); err == nil {
		proxy.blobOut.Store(0)
		start := time.Now()
		lp, err := layout.Write(filepath.Join(work, "pulled"), empty.Index)
		must(t, err)
		pimg, err := remote.Image(srcRef)
		must(t, err)
		must(t, lp.AppendImage(pimg, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "src"})))
		bundle := filepath.Join(work, "bundle")
		if out, err := exec.Command("umoci", "unpack", "--image", filepath.Join(work, "pulled")+":src", bundle).CombinedOutput(); err != nil {
			t.Errorf("umoci: %v: %s", err, out)
			return
		}
		rootfs := filepath.Join(bundle, "rootfs")
		timeCmd(t, "chroot", rootfs, "/bin/sh", "-c", "true")
		first := time.Since(start)
		fetched := proxy.blobOut.Load()
		evictPageCache(rootfs)
		cold := catAll(t, rootfs)
		warm := catAll(t, rootfs)
		t.Logf("| pull + umoci unpack | %.1f s | %d MiB (%.0f%% of gzip) | %.1f s | %.1f s |", first.Seconds(), fetched>>20, 100*float64(fetched)/float64(gzSize), cold.Seconds(), warm.Seconds())
		os.RemoveAll(bundle)
	}
}

// lazyVariants measures lazy mounts, each with an empty chunk cache, of
// the image converted in other forms: the spec's +zstd layers with an
// embedded chunk index, and each form laid out for a prefetch list
// recorded over a mount of dst running sh -c true.
func lazyVariants(t *testing.T, b, host, src, dst, work string, proxy *linkProxy) {
	workload := []string{"/bin/sh", "-c", "true"}
	if w := os.Getenv("OCIEROFS_LAZY_BENCH_RUN"); w != "" {
		workload = []string{"/bin/sh", "-c", w}
	}
	chrootRun := func(root string) { timeCmd(t, "chroot", append([]string{root}, workload...)...) }
	t.Logf("workload: %q", workload)
	list := filepath.Join(work, "prefetch.list")
	{
		target := t.TempDir()
		m := startMount(t, b, "--plain-http", "--cache-dir", filepath.Join(work, "record-chunks"), "--prefetch", "none", "--record", list, dst, target)
		chrootRun(target)
		if _, stderr, code := run(t, b, "umount", target); code != 0 {
			t.Fatalf("umount: %s", stderr)
		}
		must(t, m.wait(t))
		raw, err := os.ReadFile(list)
		must(t, err)
		paths := strings.Fields(string(raw))
		t.Logf("prefetch list: %d files, the first: %s", len(paths), strings.Join(paths[:min(len(paths), 10)], " "))
	}
	zstdIndex := []string{"--media-type", "spec", "--layer-compression", "zstd", "--chunk-index", "embedded"}
	variants := []struct {
		name string
		args []string
	}{
		{"raw layers (as before)", nil},
		{"+zstd, embedded chunk index", zstdIndex},
		{"raw layers, prefetch list", []string{"--prefetch-list", list}},
		{"+zstd, embedded chunk index, prefetch list", append([]string{"--prefetch-list", list}, zstdIndex...)},
	}
	for i, v := range variants {
		ref := dst
		if v.args != nil {
			ref = fmt.Sprintf("%s/bench/root:v%d", host, i)
			start := time.Now()
			args := append(append([]string{"convert", "--plain-http", "-q"}, v.args...), src, ref)
			if _, stderr, code := run(t, b, args...); code != 0 {
				t.Fatalf("convert %q: %s", v.args, stderr)
			}
			t.Logf("%s: converted in %.1f s", v.name, time.Since(start).Seconds())
		}
		r, err := name.ParseReference(ref, name.Insecure)
		must(t, err)
		vimg, err := remote.Image(r)
		must(t, err)
		ls, _ := vimg.Layers()
		var size int64
		for _, l := range ls {
			n, _ := l.Size()
			size += n
		}
		proxy.blobOut.Store(0)
		proxy.blobReq.Store(0)
		target := t.TempDir()
		start := time.Now()
		m := startMount(t, b, "--plain-http", "--cache-dir", filepath.Join(work, fmt.Sprintf("chunks-v%d", i)), "--cache-size", "20G", ref, target)
		chrootRun(target)
		first := time.Since(start)
		fetched, reqs := proxy.blobOut.Load(), proxy.blobReq.Load()
		cold := catAll(t, target)
		warm := catAll(t, target)
		t.Logf("| %s | %d MiB | %.1f s | %.1f MiB (%.1f%%) in %d requests | %.1f s | %.1f s |", v.name, size>>20, first.Seconds(),
			float64(fetched)/(1<<20), 100*float64(fetched)/float64(size), reqs, cold.Seconds(), warm.Seconds())
		if _, stderr, code := run(t, b, "umount", target); code != 0 {
			t.Fatalf("umount: %s", stderr)
		}
		must(t, m.wait(t))
	}
}
