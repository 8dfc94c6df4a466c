package mirror_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert/mirror"
)

// dirLayer makes a tar+gzip layer of a directory tree (sorted, fixed
// times and owners), under prefix.
func dirLayer(t testing.TB, root, prefix string) *blobLayer {
	t.Helper()
	var paths []string
	must(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		paths = append(paths, p)
		return nil
	}))
	sort.Strings(paths)
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, p := range paths {
		fi, err := os.Lstat(p)
		must(t, err)
		rel, _ := filepath.Rel(root, p)
		name := filepath.ToSlash(filepath.Join(prefix, rel))
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		h, err := tar.FileInfoHeader(fi, link)
		must(t, err)
		h.Name, h.ModTime, h.Uid, h.Gid, h.Uname, h.Gname, h.Format = name, testTime, 0, 0, "", "", tar.FormatPAX
		if fi.IsDir() {
			h.Name += "/"
		}
		must(t, tw.WriteHeader(h))
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			must(t, err)
			tw.Write(b)
		}
	}
	must(t, tw.Close())
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	zw.Write(raw.Bytes())
	must(t, zw.Close())
	return &blobLayer{blob: gz.Bytes(), diffID: sha256Of(raw.Bytes())}
}

// TestMirrorFigures measures push→twin latency and throughput on a base
// of real files (the Linux tree's fs/ from the benchmark datasets). It runs
// only with MIRROR_BENCH=1 (and DATA=/var/tmp/erofsbench by default).
func TestMirrorFigures(t *testing.T) {
	if os.Getenv("MIRROR_BENCH") == "" {
		t.Skip("MIRROR_BENCH=1 runs it")
	}
	data := os.Getenv("DATA")
	if data == "" {
		data = "/var/tmp/erofsbench"
	}
	src := filepath.Join(data, "linux", "fs")
	if _, err := os.Stat(src); err != nil {
		t.Skipf("no %s (make-datasets.sh)", src)
	}
	base := dirLayer(t, src, "usr/src/fs")
	t.Logf("base layer: Linux fs/ (52 MB, 2485 files), %.1f MB gzip", float64(len(base.blob))/1e6)
	n := 10
	imgs := make([]v1.Image, n)
	var srcBytes int64
	for i := range imgs {
		top := tarLayer(t, dir("opt", 0o755), file(fmt.Sprintf("opt/app%d.bin", i), 0o644, randomBytes(uint64(100+i), 1<<20)),
			file("etc/motd", 0o644, fmt.Appendf(nil, "image %d\n", i)))
		imgs[i] = image(t, base, top)
		sz, _ := imgs[i].Size()
		for _, l := range []*blobLayer{base, top} {
			srcBytes += int64(len(l.blob))
		}
		_ = sz
	}

	// The yardstick: `ocierofs convert` of one image, pull to push.
	plain := startRegistry(t, "")
	plain.push(t, "y/app0:1", imgs[0])
	bin := mirrorBinary(t)
	start := time.Now()
	if out, err := exec.Command(bin, "convert", "-q", "--plain-http", "-j", "2", plain.host+"/y/app0:1").CombinedOutput(); err != nil {
		t.Fatalf("ocierofs convert: %v: %s", err, out)
	}
	t.Logf("yardstick: ocierofs convert of one image, pull to push: %.2fs", time.Since(start).Seconds())

	h := newHarness(t, "b", nil)
	h.startWorker(t, "w1")
	h.startWorker(t, "w2")
	start = time.Now()
	dg := h.reg.push(t, "b/app0:1", imgs[0])
	pushed := time.Since(start)
	h.reg.waitTwin(t, "b/app0:1", dg, 5*time.Minute)
	t.Logf("cold: push %.2fs, then twin after %.2fs (base and top converted)", pushed.Seconds(), time.Since(start).Seconds()-pushed.Seconds())
	r := h.waitRecord(t, "b/app0", "1", dg, time.Minute, func(r *mirror.Record) bool { return r.State == mirror.StateDone })
	t.Logf("cold: notification → queued %.2fs after the push, taken %.2fs later, converted and pushed in %.2fs",
		r.Queued.Sub(start.Add(pushed)).Seconds(), r.Started.Sub(r.Queued).Seconds(), r.Seconds)
	start = time.Now()
	dg = h.reg.push(t, "b/app1:1", imgs[1])
	pushed = time.Since(start)
	h.reg.waitTwin(t, "b/app1:1", dg, 5*time.Minute)
	t.Logf("warm: push %.2fs, then twin after %.2fs (base from the cache)", pushed.Seconds(), time.Since(start).Seconds()-pushed.Seconds())

	start = time.Now()
	digests := make([]v1.Hash, n)
	var wg sync.WaitGroup
	for i := 2; i < n; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); digests[i] = h.reg.push(t, fmt.Sprintf("b/app%d:1", i), imgs[i]) }()
	}
	wg.Wait()
	t.Logf("burst: the %d pushes took %.2fs", n-2, time.Since(start).Seconds())
	var secs []float64
	for i := 2; i < n; i++ {
		h.reg.waitTwin(t, fmt.Sprintf("b/app%d:1", i), digests[i], 5*time.Minute)
		r := h.waitRecord(t, fmt.Sprintf("b/app%d", i), "1", digests[i], time.Minute, func(r *mirror.Record) bool { return r.State == mirror.StateDone })
		secs = append(secs, r.Seconds)
	}
	el := time.Since(start).Seconds()
	sort.Float64s(secs)
	t.Logf("burst: seconds per task (worker side, sorted): %.2f", secs)
	per := float64(srcBytes) / float64(n) / 1e6
	t.Logf("burst: %d images pushed at once, all twins %.2fs after the first push: %.2f images/s, %.1f MB/s of source images (%.1f MB each)",
		n-2, el, float64(n-2)/el, float64(n-2)*per/el, per)
	t.Logf("layers converted %v, reused %v; bytes in %.1f MB, out %.1f MB",
		h.metric(t, `ocierofs_mirror_layers_total{result="converted"}`), h.metric(t, `ocierofs_mirror_layers_total{result="reused"}`),
		h.metric(t, "ocierofs_mirror_bytes_in_total")/1e6, h.metric(t, "ocierofs_mirror_bytes_out_total")/1e6)
}
