package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestConvertLayoutDeviceCLI: convert --layout device writes an OCI
// layout that check --spec passes and check finds faithful to its source;
// without the spec's media types, with --flatten, or of another name, the
// layout is refused before anything is converted.
func TestConvertLayoutDeviceCLI(t *testing.T) {
	b := bin(t)
	src := "oci:" + filepath.Join(specVectorsDir, "source") + ":latest"
	out := "oci:" + filepath.Join(t.TempDir(), "dev") + ":latest"
	if _, e, code := run(t, b, "convert", "-q", "--media-type", "spec", "--layout", "device", "--layer-compression", "zstd", "--chunk-index", "standalone", src, out); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, e)
	}
	if o, e, code := run(t, b, "check", "--spec", out); code != 0 || !strings.Contains(o, "(0 SHOULDs unmet)") {
		t.Errorf("check --spec: exit %d: %s%s", code, o, e)
	}
	if o, e, code := run(t, b, "check", out, src); code != 0 {
		t.Errorf("check: exit %d: %s%s", code, o, e)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--layout", "device"}, "needs --media-type spec"},
		{[]string{"--media-type", "spec", "--layout", "device", "--flatten"}, "--layout device with --flatten"},
		{[]string{"--media-type", "spec", "--layout", "sideways"}, `--layout "sideways": want overlay, device or overlay-data`},
	} {
		args := append(append([]string{"convert", "-q"}, tc.args...), src, "oci:"+filepath.Join(t.TempDir(), "x")+":latest")
		if _, e, code := run(t, b, args...); code == 0 || !strings.Contains(e, tc.want) {
			t.Errorf("%s: exit %d: %s (want %q)", strings.Join(tc.args, " "), code, e, tc.want)
		}
	}
}

// TestConvertLayoutOverlayDataCLI: convert --layout overlay-data writes an
// OCI layout that check --spec passes and check finds faithful to its
// source; without the spec's media types or with --flatten it is refused.
func TestConvertLayoutOverlayDataCLI(t *testing.T) {
	b := bin(t)
	src := "oci:" + filepath.Join(specVectorsDir, "source") + ":latest"
	out := "oci:" + filepath.Join(t.TempDir(), "odata") + ":latest"
	if _, e, code := run(t, b, "convert", "-q", "--media-type", "spec", "--layout", "overlay-data", "--layer-compression", "zstd", "--chunk-index", "standalone", src, out); code != 0 {
		t.Fatalf("convert: exit %d: %s", code, e)
	}
	if o, e, code := run(t, b, "check", "--spec", out); code != 0 || !strings.Contains(o, "(0 SHOULDs unmet)") {
		t.Errorf("check --spec: exit %d: %s%s", code, o, e)
	}
	if o, e, code := run(t, b, "check", out, src); code != 0 {
		t.Errorf("check: exit %d: %s%s", code, o, e)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--layout", "overlay-data"}, "needs --media-type spec"},
		{[]string{"--media-type", "spec", "--layout", "overlay-data", "--flatten"}, "--layout overlay-data with --flatten"},
	} {
		args := append(append([]string{"convert", "-q"}, tc.args...), src, "oci:"+filepath.Join(t.TempDir(), "x")+":latest")
		if _, e, code := run(t, b, args...); code == 0 || !strings.Contains(e, tc.want) {
			t.Errorf("%s: exit %d: %s (want %q)", strings.Join(tc.args, " "), code, e, tc.want)
		}
	}
}
