//go:build linux

package fstree

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ocierofs/ocierofs/erofs"
)

// TestFromImageMatchesMount reads the reader's fixture images both through
// FromImage and through the kernel: the two trees must be equal.
func TestFromImageMatchesMount(t *testing.T) {
	requireRoot(t)
	for _, name := range []string{"plain.img", "chunk.img"} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join("..", "..", "erofs", "testdata", name)
			f, err := os.Open(file)
			if os.IsNotExist(err) {
				t.Skipf("no fixture %s", file)
			}
			check(t, err)
			defer f.Close()
			st, err := f.Stat()
			check(t, err)
			img, err := erofs.Open(f, st.Size())
			check(t, err)
			got, err := FromImage(img)
			check(t, err)

			mnt := t.TempDir()
			if out, err := exec.Command("mount", "-t", "erofs", "-o", "loop,ro", file, mnt).CombinedOutput(); err != nil {
				t.Skipf("cannot mount erofs: %v: %s", err, strings.TrimSpace(string(out)))
			}
			defer func() {
				if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
					t.Errorf("umount: %v: %s", err, out)
				}
			}()
			want, err := FromDir(mnt)
			check(t, err)
			if d := Diff(want, got, DiffOptions{}); len(d) != 0 {
				t.Errorf("mount vs FromImage:\n%s", strings.Join(d, "\n"))
			}
			if name == "plain.img" {
				// Guard against comparing two empty trees.
				if n := got.Node("hello.txt"); got.Len() < 300 || len(got.LinkGroups()) < 2 || n == nil || n.Xattrs["user.foo"] != "bar" {
					t.Errorf("plain.img: unexpected tree (%d paths, %d link groups)", got.Len(), len(got.LinkGroups()))
				}
			}
		})
	}
}
