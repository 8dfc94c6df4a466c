package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestConvertLayoutCLI: convert --layout device and --layout overlay-data
// write an OCI layout that check --spec passes and check finds faithful
// to its source; without the spec's media types, with --flatten, or of
// another name, the layout is refused before anything is converted.
func TestConvertLayoutCLI(t *testing.T) {
	b := bin(t)
	src := "oci:" + filepath.Join(specVectorsDir, "source") + ":latest"
	for _, layout := range []string{"device", "overlay-data"} {
		t.Run(layout, func(t *testing.T) {
			out := "oci:" + filepath.Join(t.TempDir(), "out") + ":latest"
			if _, e, code := run(t, b, "convert", "-q", "--media-type", "spec", "--layout", layout, "--layer-compression", "zstd", "--chunk-index", "standalone", src, out); code != 0 {
				t.Fatalf("convert: exit %d: %s", code, e)
			}
			if o, e, code := run(t, b, "check", "--spec", out); code != 0 || !strings.Contains(o, "(0 SHOULDs unmet)") {
				t.Errorf("check --spec: exit %d: %s%s", code, o, e)
			}
			if o, e, code := run(t, b, "check", out, src); code != 0 {
				t.Errorf("check: exit %d: %s%s", code, o, e)
			}
			refuse(t, b, src, []string{"--layout", layout}, "needs --media-type spec")
			refuse(t, b, src, []string{"--media-type", "spec", "--layout", layout, "--flatten"}, "--layout "+layout+" with --flatten")
		})
	}
	refuse(t, b, src, []string{"--media-type", "spec", "--layout", "sideways"}, `--layout "sideways": want overlay, device or overlay-data`)
}

// refuse runs convert with flags on src and wants it to fail with an
// error that holds want.
func refuse(t *testing.T, b, src string, flags []string, want string) {
	t.Helper()
	args := append(append([]string{"convert", "-q"}, flags...), src, "oci:"+filepath.Join(t.TempDir(), "x")+":latest")
	if _, e, code := run(t, b, args...); code == 0 || !strings.Contains(e, want) {
		t.Errorf("%s: exit %d: %s (want %q)", strings.Join(flags, " "), code, e, want)
	}
}
