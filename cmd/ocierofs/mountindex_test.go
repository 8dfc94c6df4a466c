package main

import (
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ocierofs/ocierofs/convert/fstree"
)

// TestMountChunkIndex: ocierofs mount reads the layers of an image in a
// registry that have the EROFS image spec's chunk index through it (a
// +zstd layer by ranges, not whole; a standalone chunk-index layer with
// the layer before it, and not as a layer of the tree), and shows the
// tree the kernel's EROFS mounts of the containerd form of the image show.
func TestMountChunkIndex(t *testing.T) {
	requireLazyMount(t)
	b := bin(t)
	host := dockerRegistry(t)
	want := kernelTree(t, convertBusyboxTo(t, b, host))
	src := "oci:" + copyBusyboxLayout(t) + ":latest"
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"zstd-embedded", []string{"--layer-compression", "zstd", "--chunk-index", "embedded"}},
		{"zstd-standalone", []string{"--layer-compression", "zstd", "--chunk-index", "standalone"}},
		{"raw-embedded", []string{"--chunk-index", "embedded", "--chunk-index-size", "64K"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref := host + "/busybox:" + tc.name
			args := slices.Concat([]string{"convert", "--plain-http", "-q", "--media-type", "spec"}, tc.args, []string{src, ref})
			if _, stderr, code := run(t, b, args...); code != 0 {
				t.Fatalf("convert: exit %d: %s", code, stderr)
			}
			target := t.TempDir()
			m := startMount(t, b, "--plain-http", "--cache-dir", t.TempDir(), ref, target)
			got, err := fstree.FromDir(target)
			must(t, err)
			for _, d := range fstree.Diff(want, got, fstree.DiffOptions{Want: "kernel EROFS", Got: "mount through the chunk index"}) {
				t.Error(d)
			}
			m.cmd.Process.Signal(syscall.SIGINT)
			must(t, m.wait(t))
			log := m.stderr.String()
			// The top layer has no standalone index (§3.8 keeps an
			// EROFS layer last): it alone is fetched whole.
			if !strings.Contains(log, "through its chunk index") || strings.Count(log, "fetching it whole") > strings.Count(tc.name, "standalone") {
				t.Errorf("layers not read through their chunk index:\n%s", log)
			}
		})
	}
}
