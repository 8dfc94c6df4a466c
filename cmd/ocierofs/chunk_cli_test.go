package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ocierofs/ocierofs/convert/fstree"
)

// TestCLIChunks drives --chunk-size, --blobdev, --tar-index and merge
// through the binary: what they print, what they refuse (exit 1, one
// error, no output left behind).
func TestCLIChunks(t *testing.T) {
	b := bin(t)
	dir := t.TempDir()
	layer := "../../testdata/demo-layer.tar.gz"
	out := func(name string) string { return filepath.Join(dir, name) }

	if _, e, code := run(t, b, "mkfs", "-q", "--chunk-size", "4K", out("c.erofs"), layer); code != 0 {
		t.Fatalf("mkfs --chunk-size: exit %d: %s", code, e)
	}
	if o, _, _ := run(t, b, "inspect", out("c.erofs")); !strings.Contains(o, "chunked_file") || !strings.Contains(o, "distinct chunks") {
		t.Errorf("inspect of a chunk-based image:\n%s", o)
	}
	if _, e, code := run(t, b, "mkfs", "-q", "--blobdev", out("l.blob"), out("meta.erofs"), layer); code != 0 {
		t.Fatalf("mkfs --blobdev: exit %d: %s", code, e)
	}
	if o, _, _ := run(t, b, "inspect", out("meta.erofs")); !strings.Contains(o, "device_table") || !strings.Contains(o, "data on extra devices") {
		t.Errorf("inspect of a blob image:\n%s", o)
	}
	// The readers find a blob beside the image by its tag, and a tar
	// appended to its index.
	if o, e, code := run(t, b, "verify", out("meta.erofs"), layer); code != 0 || !strings.Contains(o, "matches") {
		t.Errorf("verify of a blob image: exit %d: %s%s", code, o, e)
	}
	raw, err := exec.Command("gzip", "-dc", layer).Output()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out("l.tar"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, e, code := run(t, b, "mkfs", "-q", "--tar-index", "--append-tar", out("ti.erofs"), out("l.tar")); code != 0 {
		t.Fatalf("mkfs --tar-index --append-tar: exit %d: %s", code, e)
	}
	if o, e, code := run(t, b, "verify", out("ti.erofs"), layer); code != 0 || !strings.Contains(o, "matches") {
		t.Errorf("verify of a tar index with its tar appended: exit %d: %s%s", code, o, e)
	}

	// The same layer again over its own image as a chunk dictionary: every
	// chunk is known, the new blob stays empty.
	if _, e, code := run(t, b, "mkfs", "-q", "--blobdev", out("again.blob"), "--chunk-dict", out("meta.erofs"), out("again.erofs"), layer); code != 0 {
		t.Fatalf("mkfs --chunk-dict: exit %d: %s", code, e)
	}
	if fi, err := os.Stat(out("again.blob")); err != nil || fi.Size() != 0 {
		t.Errorf("blob over a dictionary holding every chunk: %v bytes (%v), want 0", fi.Size(), err)
	}
	// inspect says where the data is: all on the dictionary's blob.
	if o, _, _ := run(t, b, "inspect", out("again.erofs")); !regexp.MustCompile(`data on extra devices:\s+\d+ bytes \(device 2 [^:]*l\.blob: \d+\)`).MatchString(o) {
		t.Errorf("inspect of a layer over a chunk dictionary does not say the data is on its blob:\n%s", o)
	}

	// One device per layer, in order: the blob of the first, the image
	// of the second.
	_, e, code := run(t, b, "merge", out("m.erofs"), out("meta.erofs"), out("c.erofs"))
	if code != 0 || !strings.Contains(e, out("l.blob")+" "+out("c.erofs")) {
		t.Errorf("merge: exit %d, want the devices l.blob c.erofs listed: %s", code, e)
	}
	// The mount command it prints mounts it: the same tree as extract's
	// (as root, and not under -short: the fast tier mounts nothing).
	if os.Geteuid() == 0 && !testing.Short() {
		_, cmdline, ok := strings.Cut(e, "mount it with: ")
		cmdline, _, _ = strings.Cut(cmdline, "\n")
		mnt := out("mnt")
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		if !ok || !strings.HasSuffix(cmdline, " DIR") {
			t.Fatalf("merge printed no mount command: %s", e)
		}
		if o, err := exec.Command("sh", "-c", strings.TrimSuffix(cmdline, "DIR")+mnt).CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", cmdline, err, o)
		} else {
			defer func() {
				exec.Command("umount", mnt).Run()
				for _, dev := range []string{out("l.blob"), out("c.erofs")} {
					loops, _ := exec.Command("losetup", "-j", dev, "-O", "NAME", "-n").Output()
					for _, l := range strings.Fields(string(loops)) {
						exec.Command("losetup", "-d", l).Run()
					}
				}
			}()
			if _, e, code := run(t, b, "extract", out("m.erofs"), out("x")); code != 0 {
				t.Fatalf("extract of the merged image: exit %d: %s", code, e)
			}
			got, err := fstree.FromDir(mnt)
			if err != nil {
				t.Fatal(err)
			}
			want, err := fstree.FromDir(out("x"))
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range fstree.Diff(want, got, fstree.DiffOptions{IgnoreRootMeta: true}) {
				t.Errorf("mounted merge vs extract: %s", d)
			}
			if got.Len() < 3 {
				t.Errorf("mounted merge holds %d paths", got.Len())
			}
		}
	}

	for _, bad := range [][]string{
		{"mkfs", "--chunk-size", "3000", out("x.erofs"), layer},
		{"mkfs", "--chunk-size", "64K", "--compress", "lz4", out("x.erofs"), layer},
		{"mkfs", "--blobdev", out("x.blob"), "--compress", "lz4", out("x.erofs"), layer},
		{"mkfs", "--tar-index", out("x.erofs"), layer}, // gzip: no index into it
		{"mkfs", "--append-tar", out("x.erofs"), layer},
		{"mkfs", "--chunk-dict", out("meta.erofs"), out("x.erofs"), layer},
		{"mkfs", "--blobdev", out("x.blob"), "--chunk-dict", out("c.erofs"), out("x.erofs"), layer}, // no blob there
		{"mkfs", "--tar-index", "--block-size", "4096", out("x.erofs"), layer},
		{"mkfs", "--tar-index", "--min-kernel", "6.1", out("x.erofs"), layer},
		{"merge", out("x.erofs")},
		{"merge", out("x.erofs"), layer},
	} {
		_, e, code := run(t, b, bad...)
		if code != 1 || strings.Count(strings.TrimSpace(e), "\n") > 1 {
			t.Errorf("%v: exit %d, want 1 and one error: %s", bad, code, e)
		}
		for _, f := range []string{"x.erofs", "x.blob"} {
			if _, err := os.Stat(out(f)); err == nil {
				t.Errorf("%v: failed but left %s", bad, f)
			}
		}
	}
}
