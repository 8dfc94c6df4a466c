package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// goldenFile pins the output bytes of the testdata inputs: an intended
// change of output is a visible diff of this file, an unintended one a
// failing test. GOLDEN_UPDATE=1 rewrites it.
const goldenFile = "../../testdata/golden-digests.txt"

// TestGolden: mkfs of the demo layer with every codec and the main image
// options, and convert of the busybox layout with the main image options,
// give the pinned bytes, with one worker and with three.
func TestGolden(t *testing.T) {
	t.Parallel()
	b := bin(t)
	dir := t.TempDir()
	demo := "../../testdata/demo-layer.tar.gz"
	text := filepath.Join(dir, "text.tar")
	writeTextTar(t, text)
	got := map[string]string{}
	for _, tc := range []struct {
		name, layer string
		args        []string
	}{
		{"mkfs", demo, nil},
		{"mkfs-chunk-4k", demo, []string{"--chunk-size", "4K"}},
		{"mkfs-no-inline-data", demo, []string{"--no-inline-data"}},
		{"mkfs-blocks-512", demo, []string{"--block-size", "512"}},
		{"mkfs-text", text, nil},
		{"mkfs-text-lz4", text, []string{"-z", "lz4"}},
		{"mkfs-text-lz4hc", text, []string{"-z", "lz4hc"}},
		{"mkfs-text-deflate", text, []string{"-z", "deflate"}},
		{"mkfs-text-lzma", text, []string{"-z", "lzma"}},
		{"mkfs-text-zstd", text, []string{"-z", "zstd"}},
		{"mkfs-text-lz4hc-fragments", text, []string{"-z", "lz4hc", "--pcluster-size", "16K", "--fragments"}},
		{"mkfs-text-zstd-4k-no-tail", text, []string{"-z", "zstd", "--pcluster-size", "4K", "--tail-packing=false"}},
	} {
		var sums []string
		for _, workers := range []string{"1", "3"} {
			out := filepath.Join(dir, tc.name+"-"+workers+".erofs")
			args := slices.Concat([]string{"mkfs", "-q", "--workers", workers}, tc.args, []string{out, tc.layer})
			if _, e, code := run(t, b, args...); code != 0 {
				t.Fatalf("%s: exit %d: %s", strings.Join(args, " "), code, e)
			}
			sums = append(sums, fileSHA256(t, out))
		}
		if sums[0] != sums[1] {
			t.Errorf("%s: one worker gives %s, three give %s", tc.name, sums[0], sums[1])
		}
		got[tc.name] = sums[0]
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"convert", nil},
		{"convert-flatten", []string{"--flatten"}},
		{"convert-zstd-layers", []string{"--layer-compression", "zstd"}},
		{"convert-spec", []string{"--media-type", "spec"}},
		{"convert-lz4", []string{"-z", "lz4"}},
	} {
		out := "oci:" + filepath.Join(dir, tc.name) + ":t"
		args := slices.Concat([]string{"convert", "-q", "-o", "json"}, tc.args, []string{"oci:../../testdata/busybox:latest", out})
		stdout, e, code := run(t, b, args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", strings.Join(args, " "), code, e)
		}
		var rep struct{ Digest string }
		if err := json.Unmarshal([]byte(stdout), &rep); err != nil || rep.Digest == "" {
			t.Fatalf("%s: no digest in %q: %v", tc.name, stdout, err)
		}
		got[tc.name] = rep.Digest
	}
	compareGolden(t, got)
}

// writeTextTar writes a layer of text files, compressible as source code
// is, made the same way on every run: the codecs' output is pinned on it.
func writeTextTar(t *testing.T, path string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for i, size := range []int{300, 5000, 70_000, 400_000} {
		var body strings.Builder
		for n := 0; body.Len() < size; n++ {
			fmt.Fprintf(&body, "func f%d_%d(x int) int { return x*%d + %d } // line %d\n", i, n%97, n*7%13, n%31, n)
		}
		hdr := &tar.Header{Name: fmt.Sprintf("src/file%d.go", i), Mode: 0o644, Size: int64(body.Len()), ModTime: mtime, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body.String()))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

// compareGolden compares got with goldenFile, or rewrites it.
func compareGolden(t *testing.T, got map[string]string) {
	t.Helper()
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range got {
			if !yield(k) {
				return
			}
		}
	})
	if os.Getenv("GOLDEN_UPDATE") != "" {
		var sb strings.Builder
		sb.WriteString("# Output digests of the testdata inputs (cmd/ocierofs TestGolden).\n")
		sb.WriteString("# An intended change of output bytes: GOLDEN_UPDATE=1 go test -run TestGolden ./cmd/ocierofs\n")
		for _, n := range names {
			fmt.Fprintf(&sb, "%s %s\n", n, got[n])
		}
		if err := os.WriteFile(goldenFile, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.Open(goldenFile)
	if err != nil {
		t.Fatalf("%v (GOLDEN_UPDATE=1 writes it)", err)
	}
	defer f.Close()
	want := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") {
			k, v, _ := strings.Cut(line, " ")
			want[k] = v
		}
	}
	for _, n := range names {
		if want[n] != got[n] {
			t.Errorf("%s: output %s, pinned %s (if intended: GOLDEN_UPDATE=1)", n, got[n], want[n])
		}
	}
	for n := range want {
		if _, ok := got[n]; !ok {
			t.Errorf("%s is pinned but not made", n)
		}
	}
}
