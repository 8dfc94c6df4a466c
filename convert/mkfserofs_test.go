package convert_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
)

// TestMkfsErofsKernel mounts what ocierofs makes only when called
// mkfs.erofs (cmd/ocierofs's TestMkfsErofs compares the rest with
// ocierofs mkfs, byte for byte): a tar index read from stdin, whose tar
// is appended afterwards as containerd does; -T's mtimes; the mtimes
// $SOURCE_DATE_EPOCH clamps; extended inodes throughout.
func TestMkfsErofsKernel(t *testing.T) {
	roundtrip.RequireMount(t)
	bin, err := filepath.Abs(ocierofsCLI(t))
	must(t, err)
	dir := t.TempDir()
	mkfs := filepath.Join(dir, "mkfs.erofs")
	must(t, os.Symlink(bin, mkfs))

	early, late := time.Date(1999, 1, 2, 3, 4, 5, 0, time.UTC), time.Date(2031, 6, 7, 8, 9, 10, 500, time.UTC)
	layer := filepath.Join(dir, "layer.tar")
	must(t, os.WriteFile(layer, convtest.LayerTar(t,
		convtest.Dir(".", 0o755).At(early),
		convtest.Dir("etc", 0o755).At(late),
		convtest.File("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/sh\n")).At(early),
		convtest.File("etc/big", 0o600, convtest.RandomBytes(3, 200<<10+7)).Own(1000, 100000).At(late),
		convtest.File("etc/text", 0o644, bytes.Repeat([]byte("compressible text, line after line\n"), 4000)),
		convtest.Symlink("etc/link", "passwd").At(late),
		convtest.Dir("var", 0o700).At(early),
		convtest.Whiteout("var/gone"),
		convtest.Opaque("var"),
		convtest.Hardlink("var/hard", "etc/passwd"),
	), 0o644))
	const uuid = "6b1ff4b0-4a6e-4c45-bc3b-1d1f0cf9d3c2"
	mkfsRun := func(env []string, args ...string) {
		t.Helper()
		in, err := os.Open(layer)
		must(t, err)
		defer in.Close()
		cmd := exec.Command(mkfs, args...)
		cmd.Stdin, cmd.Env = in, append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mkfs.erofs %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	want := convtest.TreeFromTar(t, layer, fstree.TarOptions{})
	compare := func(what, mnt string, mtime func(p string, tar time.Time) time.Time) {
		t.Helper()
		w := want
		if mtime != nil {
			w = convtest.TreeFromTar(t, layer, fstree.TarOptions{})
			for _, p := range w.Paths() {
				n := w.Node(p)
				n.Mtime = mtime(p, n.Mtime)
			}
		}
		convtest.ReportDiff(t, what, fstree.Diff(w, convtest.TreeFromDir(t, mnt), fstree.DiffOptions{}))
	}

	t.Run("tar index on stdin", func(t *testing.T) {
		idx := filepath.Join(dir, "idx.erofs")
		mkfsRun(nil, "--tar=i", "--aufs", "--quiet", "-b4096", "-U", uuid, idx)
		// containerd's form: the tar appended to the index.
		flat := filepath.Join(dir, "flat.erofs")
		ib, err := os.ReadFile(idx)
		must(t, err)
		tb, err := os.ReadFile(layer)
		must(t, err)
		must(t, os.WriteFile(flat, append(ib, tb...), 0o644))
		if len(ib) > 64<<10 {
			t.Errorf("the index takes %d bytes: the data should stay in the tar", len(ib))
		}
		compare("[index][tar]", roundtrip.Mount(t, flat), nil)
		// The index alone, the tar as its device, as mkfs.erofs --tar=i's
		// are mounted too.
		compare("index -o device=TAR", roundtrip.Mount(t, idx, layer), nil)
	})

	t.Run("-T", func(t *testing.T) {
		img := filepath.Join(dir, "t.erofs")
		mkfsRun(nil, "--tar=f", "--aufs", "--quiet", "-T", "100", "-zlz4", img)
		compare("-T 100", roundtrip.Mount(t, img), func(string, time.Time) time.Time { return time.Unix(100, 0) })
	})

	t.Run("SOURCE_DATE_EPOCH", func(t *testing.T) {
		img := filepath.Join(dir, "sde.erofs")
		epoch := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
		mkfsRun([]string{"SOURCE_DATE_EPOCH=" + strconv.FormatInt(epoch.Unix(), 10)},
			"--tar=f", "--aufs", "--quiet", "-T", "5", img)
		clamped := 0
		compare("$SOURCE_DATE_EPOCH", roundtrip.Mount(t, img), func(_ string, m time.Time) time.Time {
			if m.After(epoch) {
				clamped++
				return epoch
			}
			return m
		})
		if clamped < 3 {
			t.Errorf("only %d mtimes later than the epoch: the test shows nothing", clamped)
		}
	})

	t.Run("extended inodes", func(t *testing.T) {
		img := filepath.Join(dir, "ext.erofs")
		mkfsRun(nil, "--tar=f", "--aufs", "--quiet", "-Eforce-inode-extended", "-zlzma", "-C16384", "-Eztailpacking", img)
		compare("-Eforce-inode-extended", roundtrip.Mount(t, img), nil)
		out, err := exec.Command(bin, "inspect", img).CombinedOutput()
		must(t, err)
		if !strings.Contains(string(out), "; 0 compact, ") {
			t.Errorf("-Eforce-inode-extended left compact inodes:\n%s", out)
		}
	})
}
