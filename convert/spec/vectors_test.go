package spec

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// TestVectors: every image of the test vectors in testdata/spec (make
// spec-vectors) conforms, SHOULDs included. Each is checked as an image,
// as check --spec oci:DIR:TAG takes it: a layout's index.json names
// images by tag and is no image index of platforms (§6). The tar source
// they are made from is passed over.
func TestVectors(t *testing.T) {
	paths, err := filepath.Glob("../../testdata/spec/*/index.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) == 0 {
		t.Skip("no test vectors in testdata/spec")
	}
	for _, p := range paths {
		dir := filepath.Dir(p)
		if filepath.Base(dir) == "source" {
			continue
		}
		t.Run(filepath.Base(dir), func(t *testing.T) {
			lp, err := layout.FromPath(dir)
			if err != nil {
				t.Fatal(err)
			}
			idx, err := lp.ImageIndex()
			if err != nil {
				t.Fatal(err)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(im.Manifests) == 0 {
				t.Fatalf("%s: an empty layout", dir)
			}
			for _, d := range im.Manifests {
				var vs []Violation
				if d.MediaType.IsIndex() { // a mixed index (--merge-platform)
					sub, err := idx.ImageIndex(d.Digest)
					if err != nil {
						t.Fatal(err)
					}
					vs, err = CheckIndex(context.Background(), sub, Options{Contents: true, TempDir: t.TempDir()})
					if err != nil {
						t.Fatal(err)
					}
				} else {
					img, err := idx.Image(d.Digest)
					if err != nil {
						t.Fatal(err)
					}
					if vs, err = CheckImage(context.Background(), img, Options{Contents: true, TempDir: t.TempDir()}); err != nil {
						t.Fatal(err)
					}
				}
				for _, v := range vs {
					t.Errorf("%s: %s", d.Digest, v)
				}
			}
		})
	}
}
