package main

import (
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// TestMessages: errors a user meets first say what to do in the terms of
// this tool, not of the libraries under it.
func TestMessages(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	notErofs := filepath.Join(dir, "not.erofs")
	if err := os.WriteFile(notErofs, make([]byte, 8192), 0o644); err != nil {
		t.Fatal(err)
	}
	layer := "../../testdata/demo-layer.tar.gz"
	for _, tc := range []struct {
		name      string
		args      []string
		want, not []string
	}{
		{"a scheme", []string{"convert", "http://" + host + "/x:y"},
			[]string{"give " + host + "/x:y", "--plain-http"}, []string{"name.Insecure"}},
		{"a missing tag", []string{"convert", "--plain-http", host + "/none/such:v9"},
			[]string{"not found", `none/such on ` + host + ` has no tag "v9"`}, []string{"map[", "MANIFEST_UNKNOWN"}},
		{"mkfs into a missing directory", []string{"mkfs", filepath.Join(dir, "no/such/out.erofs"), layer},
			[]string{"directory " + filepath.Join(dir, "no/such") + ": no such file or directory"}, []string{".tmp-"}},
		{"not an image", []string{"inspect", notErofs},
			[]string{notErofs + ": not an EROFS image"}, []string{"magic 0x"}},
		{"an unreachable target", []string{"convert", "oci:../../testdata/busybox:latest", "127.0.0.1:1/x:y"},
			[]string{"cannot push to 127.0.0.1:1/x: ", "connection refused"}, []string{"layer sha256:"}},
		{"one argument", []string{"mkfs", "out.erofs"}, []string{"got 1 argument"}, []string{"arguments"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, e, code := run(t, b, tc.args...)
			if code != 1 || strings.Count(e, "\n") != 1 {
				t.Errorf("exit %d, want 1 and one line: %q", code, e)
			}
			for _, w := range tc.want {
				if !strings.Contains(e, w) {
					t.Errorf("%q does not say %q", e, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(e, n) {
					t.Errorf("%q says %q", e, n)
				}
			}
		})
	}
}

// TestHelpFlags: each flag shows one default, and placeholders alike.
func TestHelpFlags(t *testing.T) {
	out, _, code := run(t, bin(t), "convert", "--help")
	if code != 0 {
		t.Fatalf("convert --help: exit %d", code)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Count(line, "(default:") > 1 {
			t.Errorf("two defaults: %s", line)
		}
	}
	for _, want := range []string{"--workers value ", "(default: the number of CPUs)", "--max-layer-size value ", "(default: none)"} {
		if !strings.Contains(out, want) {
			t.Errorf("convert --help does not show %q", want)
		}
	}
}

// TestImageReference: inspect, ls, cat, extract and verify read a layer of
// an image in an OCI layout or a registry (+zstd there), as a user looks
// inside what was pushed; a file name is never taken for a reference.
func TestImageReference(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	layout := "oci:" + filepath.Join(dir, "bb") + ":t"
	pushed := host + "/e2e/bb:zstd"
	for _, args := range [][]string{
		{"convert", "-q", "oci:../../testdata/busybox:latest", layout},
		{"convert", "-q", "--layer-compression", "zstd", "oci:../../testdata/busybox:latest", pushed},
	} {
		if _, e, code := run(t, b, args...); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, e)
		}
	}
	var conf []string
	for _, ref := range []string{layout, pushed} {
		out, e, code := run(t, b, "cat", "--layer", "2", ref, "etc/apt/apt.conf")
		if code != 0 || out == "" {
			t.Fatalf("cat --layer 2 %s etc/apt/apt.conf: exit %d: %q %s", ref, code, out, e)
		}
		conf = append(conf, out)
		if out, e, code := run(t, b, "ls", "-R", "--layer", "2", ref); code != 0 || !strings.Contains(out, "etc/apt/apt.conf\n") {
			t.Errorf("ls -R --layer 2 %s: exit %d: %s%s", ref, code, out, e)
		}
		if out, e, code := run(t, b, "inspect", "--layer", "0", ref); code != 0 || !strings.Contains(out, "image:") || !strings.Contains(out, ref) {
			t.Errorf("inspect --layer 0 %s: exit %d: %s%s", ref, code, out, e)
		}
		ex := filepath.Join(t.TempDir(), "x")
		if _, e, code := run(t, b, "extract", "--layer", "2", ref, ex); code != 0 {
			t.Errorf("extract --layer 2 %s: exit %d: %s", ref, code, e)
		} else if got, err := os.ReadFile(filepath.Join(ex, "etc/apt/apt.conf")); err != nil || string(got) != out {
			t.Errorf("extracted etc/apt/apt.conf %q (%v), cat gave %q", got, err, out)
		}
	}
	if conf[0] != conf[1] {
		t.Errorf("etc/apt/apt.conf from the layout %q, from the registry %q", conf[0], conf[1])
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ls", layout}, "the image has 3 layers: give --layer"},
		{[]string{"ls", "--layer", "0", "oci:../../testdata/busybox:latest"}, "not EROFS (convert the image first)"},
		{[]string{"ls", "--layer", "sha256:00", layout}, "no layer of the image has that digest or diff_id"},
		{[]string{"ls", "no-such.erofs"}, "open no-such.erofs: no such file or directory"},
	} {
		if _, e, code := run(t, b, tc.args...); code != 1 || !strings.Contains(e, tc.want) {
			t.Errorf("%q: exit %d: %s; want %q", tc.args, code, e, tc.want)
		}
	}
}
