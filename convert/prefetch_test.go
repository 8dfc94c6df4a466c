package convert_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/erofs"
)

// prefetchList writes lines to a list file and reads it back.
func prefetchList(t *testing.T, lines ...string) []string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "list")
	must(t, os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644))
	list, err := convert.ReadPrefetchList(p)
	must(t, err)
	return list
}

// TestPrefetchListLayout: the files a prefetch list names go last in the
// data, in the list's order, from Result.PrefetchOffset on; the tree is
// the one built without the list (mounted by the kernel); a path the
// layer lacks is skipped, a directory warned of; the same list gives the
// same bytes.
func TestPrefetchListLayout(t *testing.T) {
	tarPath := filepath.Join(t.TempDir(), "layer.tar")
	must(t, os.WriteFile(tarPath, detTar(t, true), 0o644))
	list := prefetchList(t, "/d07/f031", "/gone/in/this/version", "/d06/f006", "# a comment", "/d03", "/d02/f018", "/d07/f031")
	if want := []string{"d07/f031", "gone/in/this/version", "d06/f006", "d03", "d02/f018"}; strings.Join(list, ",") != strings.Join(want, ",") {
		t.Fatalf("ReadPrefetchList = %q, want %q", list, want)
	}
	for _, comp := range []string{"none", "lz4"} {
		t.Run(comp, func(t *testing.T) {
			var opt convert.Options
			if comp == "lz4" {
				opt.Erofs.Compression = &erofs.Compression{Algorithm: erofs.AlgLZ4}
			}
			plain, res0 := convertBytes(t, tarPath, opt)
			if res0.PrefetchOffset != 0 {
				t.Errorf("without a list: PrefetchOffset %d", res0.PrefetchOffset)
			}
			opt.PrefetchList = list
			dir := t.TempDir()
			img, res := buildImage(t, dir, tarPath, opt)
			withList := convtest.ReadFile(t, img)
			again, _ := convertBytes(t, tarPath, opt)
			if !bytes.Equal(withList, again) {
				t.Errorf("the same tar and list gave other bytes")
			}
			if bytes.Equal(plain, withList) {
				t.Errorf("the list changed nothing")
			}
			if res.PrefetchOffset <= 0 || res.PrefetchOffset >= int64(len(withList)) || res.PrefetchOffset%4096 != 0 {
				t.Fatalf("PrefetchOffset %d of an image of %d bytes", res.PrefetchOffset, len(withList))
			}
			if w := strings.Join(res.Warnings, "\n"); !strings.Contains(w, "/d03 is not a regular file") {
				t.Errorf("warnings %q: want one for the directory d03", w)
			}
			r := readImage(t, img)
			prev := uint64(0)
			for _, p := range []string{"d07/f031", "d06/f006", "d02/f018"} {
				ino, err := r.Lstat(p)
				must(t, err)
				blk := ino.StartBlock()
				if blk*4096 < uint64(res.PrefetchOffset) || blk < prev {
					t.Errorf("%s: data at block %d: want from block %d on, after the listed file before it (%d)", p, blk, res.PrefetchOffset/4096, prev)
				}
				prev = blk
				if ino.Size < 4096 && comp == "none" {
					t.Errorf("%s: %d bytes: the test wants files of full blocks", p, ino.Size)
				}
			}
			plainImg := filepath.Join(dir, "plain.erofs")
			must(t, os.WriteFile(plainImg, plain, 0o644))
			if roundtrip.NoMount() != "" {
				t.Skip(roundtrip.NoMount())
			}
			want := convtest.TreeFromDir(t, roundtrip.Mount(t, plainImg))
			got := convtest.TreeFromDir(t, roundtrip.Mount(t, img))
			convtest.ReportDiff(t, "without the list vs with it, mounted", fstree.Diff(want, got, fstree.DiffOptions{}))
		})
	}
}

// TestPrefetchListErrors: a list file that cannot be read, or that names
// what no layer can hold, is an error that names the line.
func TestPrefetchListErrors(t *testing.T) {
	if _, err := convert.ReadPrefetchList(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Errorf("a missing list file: no error")
	}
	for _, line := range []string{"/", "/a/../../b"} {
		p := filepath.Join(t.TempDir(), "list")
		must(t, os.WriteFile(p, []byte("/ok\n"+line+"\n"), 0o644))
		_, err := convert.ReadPrefetchList(p)
		if err == nil || !strings.Contains(err.Error(), ":2:") {
			t.Errorf("line %q: error %v, want one naming line 2", line, err)
		}
	}
}
