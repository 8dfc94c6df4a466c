package convert_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/fstree"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/oci"
)

// flattenEdgeLayers are layers that make flattening hard: content replaced
// under a hard link, files replaced and deleted, a directory replaced by a
// file, an opaque directory whose own entry comes from below, and big
// content an upper layer hides.
func flattenEdgeLayers(t testing.TB) []v1.Layer {
	big := convtest.RandomBytes(11, 1<<20)
	return []v1.Layer{
		convtest.Layer(t,
			convtest.Dir(".", 0o755),
			convtest.Dir("etc", 0o750).At(convtest.MTime.Add(-time.Hour)).Xattr("user.flat", "etc"),
			convtest.File("etc/conf", 0o644, []byte("v1\n")),
			convtest.File("big", 0o644, big),
			convtest.File("t", 0o644, []byte("old content, kept by the links\n")),
			convtest.Hardlink("l1", "t"),
			convtest.Hardlink("l2", "t"),
			convtest.File("gone", 0o644, []byte("whited out\n")),
			convtest.Dir("d", 0o700),
			convtest.File("d/child", 0o644, []byte("under a directory replaced by a file\n")),
			convtest.Dir("a", 0o711).Own(5, 6),
			convtest.File("a/x", 0o644, []byte("hidden by the opaque a/\n")),
			convtest.Dir("a/sub", 0o755),
			convtest.File("a/sub/y", 0o644, []byte("hidden too\n")),
			convtest.Dir("keep", 0o755),
			convtest.File("keep/k", 0o644, []byte("stays\n")),
		),
		convtest.Layer(t,
			convtest.File("big", 0o644, []byte("small now\n")),
			convtest.File("t", 0o600, []byte("new content\n")),
			convtest.Whiteout("gone"),
			convtest.File("d", 0o644, []byte("a file where d/ was\n")),
			// a/ is not listed here: its metadata is layer 1's.
			convtest.Opaque("a"),
			convtest.File("a/new", 0o644, []byte("the only file of a/\n")),
		),
		convtest.Layer(t,
			// etc/ implied again: still layer 1's metadata.
			convtest.File("etc/more", 0o644, []byte("from layer 3\n")),
			convtest.File("keep/k2", 0o644, []byte("beside k\n")),
			convtest.Whiteout("l2"),
		),
	}
}

// restackLayers are the cases a review found flattening and the stacked
// conversion getting wrong: a hard link in the bottom layer to a file
// deleted above it, read from a spool that a middle layer had written to
// first (it got the middle layer's hidden bytes); a directory deleted (w)
// or replaced by a file (dd) in the middle and made again on top, which
// brought the bottom layer's entries back; and a directory listed before
// its parent's opaque marker ("-sub" sorts before ".wh..wh..opq") whose
// metadata the marker wiped for the layer above that implies it.
func restackLayers(t testing.TB) []v1.Layer {
	return []v1.Layer{
		convtest.Layer(t,
			convtest.Dir(".", 0o755),
			convtest.File("h1", 0o644, []byte("hard-link-content\n")),
			convtest.Hardlink("h2", "h1"),
			convtest.Dir("w", 0o755), convtest.File("w/old", 0o644, []byte("deleted in layer 2\n")),
			convtest.Dir("dd", 0o755), convtest.File("dd/k", 0o644, []byte("replaced in layer 2\n")),
			// Nothing below p/-sub: umoci, the reference, would delete it
			// for the opaque p/ and leave the directory's mtime at now.
			convtest.Dir("p", 0o755), convtest.Dir("p/-sub", 0o755), convtest.File("p/other", 0o644, []byte("hidden by the opaque p/\n")),
		),
		convtest.Layer(t,
			convtest.Whiteout("h1"),
			convtest.File("x", 0o644, []byte("MIDDLE-LAYER-DATA\n")),
			convtest.Whiteout("w"),
			convtest.File("dd", 0o644, []byte("a file for now\n")),
			convtest.Dir("p", 0o755),
			convtest.Dir("p/-sub", 0o700).Own(5, 6).At(convtest.MTime.Add(-48*time.Hour)).Xattr("user.s", "v"),
			convtest.Opaque("p"),
		),
		convtest.Layer(t,
			convtest.File("x", 0o644, []byte("top\n")),
			convtest.Dir("w", 0o755), convtest.File("w/new", 0o644, []byte("new\n")),
			convtest.Dir("dd", 0o755), convtest.File("dd/m", 0o644, []byte("m\n")),
			convtest.File("p/-sub/f3", 0o644, []byte("under an implied p/-sub\n")),
		),
	}
}

// stackCase is an image's layers that test one rule of stacking.
type stackCase struct {
	name   string
	layers []v1.Layer
}

// stackEdgeCases are the stacking rules review 21-a found the flattener,
// the stacked conversion or fstree.Stack getting wrong: a whiteout or an
// opaque marker in a directory no layer had makes it; a directory deleted
// or replaced by a file, then implied above, is a new one, without the
// old one's metadata; a lower directory's trusted.overlay.opaque (from
// the tar) does not reach the directory an upper layer implies; a
// directory deleted and made again in one layer hides what was below; an
// opaque marker listed after the layer's own entries under it keeps them.
func stackEdgeCases(t testing.TB) []stackCase {
	root := convtest.Dir(".", 0o755)
	return []stackCase{
		{"opaque makes its directory", []v1.Layer{
			convtest.Layer(t, root, convtest.File("a", 0o644, []byte("a\n"))),
			convtest.Layer(t, convtest.Opaque("d")),
		}},
		{"whiteout makes its directory", []v1.Layer{
			convtest.Layer(t, root, convtest.File("a", 0o644, []byte("a\n"))),
			convtest.Layer(t, convtest.Whiteout("d/x")),
		}},
		{"directory then file then implied directory", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("d", 0o700), convtest.File("d/x", 0o644, []byte("x\n"))),
			convtest.Layer(t, convtest.File("d", 0o644, []byte("f\n"))),
			convtest.Layer(t, convtest.File("d/y", 0o644, []byte("y\n"))),
		}},
		{"whiteout then implied directory", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("d", 0o700).Own(1, 1), convtest.File("d/x", 0o644, []byte("x\n"))),
			convtest.Layer(t, convtest.Whiteout("d")),
			convtest.Layer(t, convtest.File("d/y", 0o644, []byte("y\n"))),
		}},
		{"opaque then implied directory", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("d", 0o700).Own(1, 1).Xattr("user.k", "v"), convtest.File("d/x", 0o644, []byte("x\n"))),
			convtest.Layer(t, convtest.Opaque("d"), convtest.File("d/z", 0o644, []byte("z\n"))),
			convtest.Layer(t, convtest.File("d/y", 0o644, []byte("y\n"))),
		}},
		{"opaque after an implied child", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("o", 0o755), convtest.Dir("o/-sub", 0o700), convtest.File("o/-sub/x", 0o644, []byte("x\n"))),
			convtest.Layer(t, convtest.File("o/-sub/y", 0o644, []byte("y\n")), convtest.Opaque("o")),
		}},
		{"opaque after a declared child", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("o", 0o755), convtest.Dir("o/-sub", 0o755), convtest.File("o/-sub/x", 0o644, []byte("x\n"))),
			convtest.Layer(t, convtest.Dir("o/-sub", 0o711), convtest.File("o/-sub/y", 0o644, []byte("y\n")), convtest.Opaque("o")),
		}},
		{"overlay xattr in the tar", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("d", 0o755).Xattr("trusted.overlay.opaque", "y"), convtest.File("d/x", 0o644, []byte("x\n"))),
			convtest.Layer(t, convtest.File("d/y", 0o644, []byte("y\n"))),
		}},
		{"deleted and implied again in one layer", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("d", 0o700).Own(1, 1), convtest.File("d/x", 0o644, []byte("x\n")), convtest.Dir("a", 0o700), convtest.File("a/b", 0o644, []byte("b\n"))),
			// d listed again after its entry: still opaque.
			convtest.Layer(t, convtest.Whiteout("d"), convtest.File("d/n", 0o644, []byte("n\n")), convtest.Dir("d", 0o711), convtest.Whiteout("a"), convtest.File("a/b/y", 0o644, []byte("y\n"))),
		}},
		{"deleted and made again in one layer", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("d", 0o700), convtest.File("d/x", 0o644, []byte("x\n")), convtest.Dir("e", 0o700), convtest.File("e/w", 0o644, []byte("w\n"))),
			// e with a file in between.
			convtest.Layer(t, convtest.Whiteout("d"), convtest.Dir("d", 0o755), convtest.File("d/y", 0o644, []byte("y\n")),
				convtest.Whiteout("e"), convtest.File("e", 0o644, []byte("e\n")), convtest.Dir("e", 0o755), convtest.File("e/z", 0o644, []byte("z\n"))),
		}},
		// Review 21-b's B: a whiteout after the layer's own entries at
		// its path deletes them too, as docker, containerd and
		// mkfs.erofs --aufs apply it; d implied above is a new one.
		{"entries before their whiteout in one layer", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("d", 0o700), convtest.File("d/x", 0o644, []byte("x\n")), convtest.File("f", 0o644, []byte("f\n")),
				convtest.Dir("e", 0o700), convtest.File("e/w", 0o644, []byte("w\n"))),
			convtest.Layer(t, convtest.Dir("d", 0o711).Own(2, 2), convtest.File("d/y", 0o644, []byte("y\n")), convtest.Whiteout("d"),
				convtest.File("f", 0o600, []byte("new f\n")), convtest.Whiteout("f"),
				convtest.File("e/z", 0o644, []byte("z\n")), convtest.Whiteout("e"), convtest.File("e/q", 0o644, []byte("q\n"))),
			convtest.Layer(t, convtest.File("d/n", 0o644, []byte("n\n"))),
		}},
		// 21-b's C: a file, then a directory at one path in one layer:
		// the lower directory went with the file.
		{"file then directory in one layer", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("d", 0o700), convtest.File("d/x", 0o644, []byte("x\n"))),
			convtest.Layer(t, convtest.File("d", 0o644, []byte("d\n")), convtest.Dir("d", 0o755), convtest.File("d/y", 0o644, []byte("y\n"))),
		}},
		// 21-b's E: overlayfs's own xattrs in a tar are left out: the
		// lower d/x shows through the upper d.
		{"overlay xattrs on an upper directory", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("d", 0o755), convtest.File("d/x", 0o644, []byte("x\n")), convtest.Dir("e", 0o755), convtest.File("e/w", 0o644, []byte("w\n"))),
			convtest.Layer(t, convtest.Dir("d", 0o755).Xattr("trusted.overlay.opaque", "y"), convtest.File("d/y", 0o644, []byte("y\n")),
				convtest.Dir("r", 0o755).Xattr("trusted.overlay.redirect", "/e")),
		}},
		// 21-b's D: an opaque marker on the root, which overlayfs
		// ignores there: the stacked layer whites out what the layers
		// below have at the root instead.
		{"opaque root", []v1.Layer{
			convtest.Layer(t, root, convtest.File("a", 0o644, []byte("a\n")), convtest.Dir("d", 0o755), convtest.File("d/x", 0o644, []byte("x\n")), convtest.File("e/w", 0o644, nil)),
			convtest.Layer(t, convtest.File("f", 0o644, []byte("f\n")), convtest.Whiteout("a")),
			convtest.Layer(t, convtest.File("b", 0o644, []byte("b\n")), convtest.File("d/y", 0o644, []byte("y\n")), convtest.File("./.wh..wh..opq", 0, nil)),
			convtest.Layer(t, convtest.File("c", 0o644, []byte("c\n"))),
		}},
		// Campaign 22: a directory a layer implies, then declares,
		// under its own opaque marker: the declared metadata.
		{"implied then declared under an opaque marker", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("d", 0o755), convtest.Dir("d/b", 0o755), convtest.File("d/b/w", 0o644, nil)),
			convtest.Layer(t, convtest.File("d/b/x", 0o644, nil), convtest.Opaque("d"), convtest.Dir("d/b", 0o711)),
		}},
		// Campaign 22: a layer with an opaque root over another; the
		// lower one's d, made by its marker, goes too.
		{"opaque root over an opaque root", []v1.Layer{
			convtest.Layer(t, root, convtest.File("x", 0o644, nil)),
			convtest.Layer(t, convtest.File("a", 0o644, nil), convtest.Opaque("d"), convtest.File("./.wh..wh..opq", 0, nil)),
			convtest.Layer(t, convtest.File("./.wh..wh..opq", 0, nil), convtest.File("e", 0o644, []byte("e\n")), convtest.File("f", 0o644, nil)),
		}},
		// Campaign 22: an opaque marker in a directory its layer whited
		// out: a new, empty directory (the stacked conversion failed).
		{"opaque marker under its own whiteout", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("b", 0o700), convtest.File("b/x", 0o644, nil)),
			convtest.Layer(t, convtest.Whiteout("b"), convtest.Opaque("b"), convtest.File("c", 0o644, nil)),
		}},
		// 21-b's F: a character device 0:0 is what overlayfs takes for
		// a whiteout, in the stacked image and below a container's
		// upper directory alike: it deletes the lower x and does not show.
		{"character device 0:0", []v1.Layer{
			convtest.Layer(t, root, convtest.File("x", 0o644, []byte("x\n")), convtest.Dir("d", 0o755), convtest.File("d/w", 0o644, []byte("w\n")), convtest.File("z", 0o644, nil),
				convtest.Dir("e", 0o700), convtest.File("e/w", 0o644, []byte("w\n"))),
			// e deleted, then made again by an entry in it.
			convtest.Layer(t, convtest.Node("x", tar.TypeChar, 0o600, 0, 0), convtest.Node("d", tar.TypeChar, 0o600, 0, 0), convtest.File("y", 0o644, []byte("y\n")),
				convtest.Node("e", tar.TypeChar, 0o600, 0, 0), convtest.File("e/n", 0o644, []byte("n\n")),
				// In a directory new in the layer: not listed either
				// (its directory gets the origin marker).
				convtest.Dir("n", 0o755), convtest.Node("n/w", tar.TypeChar, 0o600, 0, 0), convtest.File("n/f", 0o644, []byte("f\n"))),
		}},
		// Review 22-d: a hard link to a whiteout, as overlayfs makes
		// them (a tar of an upper directory), is a whiteout too.
		{"hard links to whiteouts", []v1.Layer{
			convtest.Layer(t, root, convtest.File("a", 0o644, nil), convtest.File("z", 0o644, []byte("z\n")), convtest.Dir("m", 0o755), convtest.File("m/k", 0o644, nil)),
			convtest.Layer(t, convtest.Node("x", tar.TypeChar, 0o600, 0, 0), convtest.Dir("n", 0o755), convtest.Hardlink("n/y", "x"), convtest.File("n/f", 0o644, nil),
				convtest.Whiteout("z"), convtest.Hardlink("m/k", "z"), convtest.Hardlink("n/w", "m/k")),
		}},
		// Review 22-b: the flattener materializes a hidden file at its
		// first link; the layer then removes or replaces that link, and
		// the next links still get the hidden content.
		{"links to a hidden file whose first link goes", []v1.Layer{
			convtest.Layer(t, root, convtest.File("h", 0o644, []byte("h0\n"))),
			convtest.Layer(t, convtest.File("h", 0o644, []byte("h1\n")), convtest.Dir("d", 0o755), convtest.Hardlink("d/l", "h"), convtest.Whiteout("d"),
				convtest.Hardlink("m", "h"), convtest.File("m", 0o644, []byte("m\n")), // replaced by a file
				convtest.Hardlink("n", "h"), convtest.File("z", 0o644, []byte("z\n")), convtest.Hardlink("n", "z"), // by a link to another
				convtest.Hardlink("o", "h"), convtest.Hardlink("p", "o")),
			convtest.Layer(t, convtest.File("h", 0o644, []byte("h2\n"))),
		}},
		// Campaign 22's class A, the valid side: entries below a path
		// where the layer had a file or symlink, which it removed or
		// replaced by a directory first (also a directory above it), and
		// which an upper layer hides (d, p) or not (e, s).
		{"entries where the layer removed its file", []v1.Layer{
			convtest.Layer(t, root, convtest.File("a", 0o644, nil)),
			convtest.Layer(t, convtest.File("d", 0o644, nil), convtest.Whiteout("d"), convtest.File("d/x", 0o644, []byte("x\n")),
				convtest.Symlink("e", "x"), convtest.Dir("e", 0o755), convtest.File("e/y", 0o644, []byte("y\n")),
				convtest.Dir("p", 0o755), convtest.File("p/q", 0o644, nil), convtest.Whiteout("p"), convtest.File("p/q/r", 0o644, []byte("r\n")),
				convtest.File("s/t", 0o644, nil), convtest.File("s", 0o644, nil), convtest.Dir("s", 0o755), convtest.File("s/t/u", 0o644, []byte("u\n"))),
			convtest.Layer(t, convtest.Whiteout("d"), convtest.File("p", 0o644, []byte("p\n"))),
		}},
		// Campaign 22's class G: a directory that holds only a whiteout
		// or an opaque marker of the layer, below its opaque marker (in
		// either order): it is in the layer's tree, and overlayfs shows
		// it, empty, as containerd's overlay applier and mkfs.erofs
		// --aufs leave it (docker's applier removes it).
		{"whiteouts and markers below an opaque marker", []v1.Layer{
			convtest.Layer(t, root, convtest.Dir("p", 0o755), convtest.Dir("p/c", 0o700), convtest.File("p/c/b", 0o644, nil), convtest.File("p/c/x", 0o644, nil),
				convtest.Dir("p/e", 0o700), convtest.File("p/e/y", 0o644, nil), convtest.Dir("p/f", 0o700), convtest.File("p/f/z", 0o644, nil), convtest.File("p/w", 0o644, nil)),
			convtest.Layer(t, convtest.Whiteout("p/c/b"), convtest.Opaque("p/e"), convtest.Opaque("p"), convtest.Whiteout("p/f/z"), convtest.Whiteout("p/g/h")),
		}},
	}
}

// TestStackEdges: the stacked conversion of each of stackEdgeCases,
// mounted as overlayfs stacks it, shows what fstree.Stack makes of the
// source layers (what check compares a flattened image with), and the
// flattened conversion, mounted, the same. umoci, the reference of
// TestE2EFlatten, leaves some of these out (it makes no directory for an
// opaque marker, and fails on a directory over a lower file).
func TestStackEdges(t *testing.T) {
	reg := sharedRegistry(t)
	for _, tc := range stackEdgeCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			src := convtest.Image(t, "amd64", tc.layers...)
			repo := uniq("e2e/stack")
			srcRef := ref(t, reg.host, repo+":v1")
			pushImage(t, srcRef, src)
			want := stackTree(t, tc.layers)
			ignore := fstree.DiffOptions{IgnoreImpliedMtime: true, Ignore: func(p, field string) bool {
				return strings.HasPrefix(field, "xattr:trusted.overlay.")
			}}
			var mounted []*fstree.Tree
			for _, opt := range []convert.ImageOptions{{}, {Flatten: true}} {
				target := reg.host + "/" + repo + fmt.Sprintf(":flat-%v", opt.Flatten)
				mustConvert(t, srcRef.String(), target, opt, oci.Remote{})
				img, _ := remoteImage(t, ref(t, reg.host, strings.TrimPrefix(target, reg.host+"/")))
				got := convtest.TreeFromDir(t, convtest.MountStack(t, convtest.RawLayers(t, img, t.TempDir())))
				convtest.ReportDiff(t, fmt.Sprintf("fstree.Stack vs the mounted conversion (flatten %v)", opt.Flatten), fstree.Diff(want, got, ignore))
				mounted = append(mounted, got)
			}
			convtest.ReportDiff(t, "stacked vs flattened, mounted", fstree.Diff(mounted[0], mounted[1], fstree.DiffOptions{Ignore: ignore.Ignore}))
		})
	}
}

// stackTree is fstree.Stack's tree of layers.
func stackTree(t testing.TB, layers []v1.Layer) *fstree.Tree {
	tr, err := stackLayers(layers)
	must(t, err)
	return tr
}

// stackLayers is fstree.Stack's tree of layers, or its error.
func stackLayers(layers []v1.Layer) (*fstree.Tree, error) {
	stack := fstree.NewStack(time.Time{})
	for i, l := range layers {
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		tr, _, err := convert.Decompress(rc)
		if err == nil {
			_, _, err = stack.Layer(tr)
		}
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("layer %d: %w", i+1, err)
		}
	}
	return stack.Tree(), nil
}

func TestE2EFlatten(t *testing.T) {
	reg := sharedRegistry(t)
	for _, tc := range []stackCase{
		{"test image", convtest.TestImageLayers(t)},
		{"edge cases", flattenEdgeLayers(t)},
		{"deleted and made again", restackLayers(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := convtest.Image(t, "amd64", tc.layers...)
			repo := uniq("e2e/flatten")
			srcRef := ref(t, reg.host, repo+":v1")
			pushImage(t, srcRef, src)
			opt := convert.ImageOptions{Flatten: true}
			res := mustConvert(t, srcRef.String(), "", opt, oci.Remote{})
			again := mustConvert(t, srcRef.String(), reg.host+"/"+repo+":again", opt, oci.Remote{})
			if again.digest != res.digest {
				t.Errorf("flattening twice: %s, then %s", res.digest, again.digest)
			}
			got, _ := remoteImage(t, ref(t, reg.host, repo+":v1-erofs"))
			m, err := got.Manifest()
			must(t, err)
			if len(m.Layers) != 1 {
				t.Fatalf("%d layers, want 1", len(m.Layers))
			}
			if m.Layers[0].MediaType != convert.MediaTypeLayer {
				t.Errorf("media type %s", m.Layers[0].MediaType)
			}
			sm, err := src.Manifest()
			must(t, err)
			var digests []string
			for _, l := range sm.Layers {
				digests = append(digests, l.Digest.String())
			}
			if a := m.Layers[0].Annotations[convert.AnnotationSourceLayer]; a != strings.Join(digests, ",") {
				t.Errorf("source layer annotation %q, want the source layers %q", a, strings.Join(digests, ","))
			}
			cf, err := got.ConfigFile()
			must(t, err)
			if len(cf.RootFS.DiffIDs) != 1 || len(cf.History) != 1 || cf.History[0].EmptyLayer {
				t.Errorf("diff_ids %v, history %+v: want one layer and one history entry for it", cf.RootFS.DiffIDs, cf.History)
			}
			if !contains(cf.OSFeatures, "erofs") {
				t.Errorf("os.features %v", cf.OSFeatures)
			}
			layers := convtest.RawLayers(t, got, t.TempDir())
			checkNoWhiteouts(t, layers[0])
			convtest.CompareWithUmoci(t, src, layers)

			// The same tree as the stacked (not flattened) conversion.
			stacked := mustConvert(t, srcRef.String(), reg.host+"/"+repo+":stacked", convert.ImageOptions{}, oci.Remote{})
			simg, _ := remoteImage(t, ref(t, reg.host, repo+":stacked"))
			want := convtest.TreeFromDir(t, convtest.MountStack(t, convtest.RawLayers(t, simg, t.TempDir())))
			flat := convtest.TreeFromDir(t, convtest.MountStack(t, layers))
			convtest.ReportDiff(t, "flattened vs stacked", diffTrees(want, flat))
			t.Logf("stacked %s, flattened %s: %d paths", stacked.digest, res.digest, flat.Len())
		})
	}

	// Hard links to files of lower layers, as docker and containerd apply
	// them (into the tree below): flattened, they are links to the lower
	// file, or copies of its content where an upper layer replaced or
	// deleted it. A stacked conversion refuses them, as mkfs.erofs does:
	// one layer's image cannot link into another's.
	t.Run("links to lower layers", func(t *testing.T) {
		src := convtest.Image(t, "amd64",
			convtest.Layer(t, convtest.Dir(".", 0o755), convtest.Dir("bin", 0o755), convtest.File("bin/busybox", 0o755, []byte("#!busybox\n")),
				convtest.File("t", 0o644, []byte("old t\n")), convtest.File("z", 0o600, []byte("z, deleted above\n"))),
			convtest.Layer(t, convtest.Hardlink("hl", "bin/busybox"), convtest.Hardlink("ht", "t"), convtest.Hardlink("hz", "z")),
			convtest.Layer(t, convtest.File("t", 0o644, []byte("new t\n")), convtest.Whiteout("z"), convtest.Hardlink("hl2", "hl"),
				// A link to a link that the layer above replaces.
				convtest.File("q", 0o644, []byte("q\n")), convtest.Hardlink("qh", "q"), convtest.Hardlink("qk", "qh")),
			convtest.Layer(t, convtest.File("qh", 0o644, []byte("qh replaced\n"))),
		)
		repo := uniq("e2e/flatten-links")
		srcRef := ref(t, reg.host, repo+":v1")
		pushImage(t, srcRef, src)
		res := mustConvert(t, srcRef.String(), "", convert.ImageOptions{Flatten: true}, oci.Remote{})
		got, _ := remoteImage(t, ref(t, reg.host, repo+":v1-erofs"))
		_, flat := convtest.CompareWithUmoci(t, src, convtest.RawLayers(t, got, t.TempDir()))
		t.Logf("flattened %s: %d paths", res.digest, flat.Len())
		_, err := convertRef(context.Background(), t, srcRef.String(), reg.host+"/"+repo+":stacked", convert.ImageOptions{}, oci.Remote{})
		if err == nil || !strings.Contains(err.Error(), `hard link to "bin/busybox", a file of a layer below`) {
			t.Errorf("stacked conversion: err = %v, want a refusal of hl", err)
		}
		bad := convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("a", 0o644, nil)), convtest.Layer(t, convtest.Hardlink("l", "nowhere")))
		badRef := ref(t, reg.host, repo+":bad")
		pushImage(t, badRef, bad)
		_, err = convertRef(context.Background(), t, badRef.String(), reg.host+"/"+repo+":bad-flat", convert.ImageOptions{Flatten: true}, oci.Remote{})
		if err == nil || !strings.Contains(err.Error(), `entry "l": hard link to "nowhere", which no layer has`) {
			t.Errorf("flattening a link to nothing: err = %v", err)
		}
		requireAbsent(t, ref(t, reg.host, repo+":bad-flat"))
		// Also where an upper layer hides the link: docker applies the
		// layer below it first, and fails (campaign 22).
		hidden := convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755)), convtest.Layer(t, convtest.Hardlink("d/d", "b")), convtest.Layer(t, convtest.Whiteout("d/d")))
		hiddenRef := ref(t, reg.host, repo+":hidden")
		pushImage(t, hiddenRef, hidden)
		_, err = convertRef(context.Background(), t, hiddenRef.String(), reg.host+"/"+repo+":hidden-flat", convert.ImageOptions{Flatten: true}, oci.Remote{})
		if err == nil || !strings.Contains(err.Error(), `entry "d/d": hard link to "b", which no layer has`) {
			t.Errorf("flattening a hidden link to nothing: err = %v", err)
		}
		// An entry below a non-directory of its own layer, where an
		// upper layer hides both: docker applies the layer first, and
		// fails there; so do the stacked conversion and fstree.Stack.
		for i, bad := range [][]convtest.Entry{
			{convtest.Symlink("d", "x/y"), convtest.File("d/c", 0o644, nil)},
			{convtest.Dir("d", 0o755), convtest.File("d/c", 0o644, nil), convtest.Whiteout("d"), convtest.File("d", 0o644, nil), convtest.Whiteout("d/c")},
			{convtest.File("d", 0o644, nil), convtest.Opaque("d")},
		} {
			under := convtest.Image(t, "amd64", convtest.Layer(t, append([]convtest.Entry{convtest.Dir(".", 0o755)}, bad...)...), convtest.Layer(t, convtest.File("d", 0o644, nil)))
			tag := fmt.Sprintf(":under%d", i)
			underRef := ref(t, reg.host, repo+tag)
			pushImage(t, underRef, under)
			_, err = convertRef(context.Background(), t, underRef.String(), reg.host+"/"+repo+tag+"-flat", convert.ImageOptions{Flatten: true}, oci.Remote{})
			if err == nil || !strings.Contains(err.Error(), `parent "d" is not a directory`) {
				t.Errorf("flattening an entry under a hidden non-directory of its layer (%d): err = %v", i, err)
			}
		}
		// Links to a lower layer's file that their layer takes back
		// (review 23): a file, a whiteout or a file over their directory
		// after them; a link made before its layer's own file at the
		// target links to the lower one. The kernel shows what
		// fstree.Stack makes of them (umoci keeps entries before a
		// whiteout of their own layer).
		takenLayers := []v1.Layer{
			convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("t", 0o644, []byte("t\n")), convtest.File("u", 0o644, []byte("u\n")),
				convtest.File("v", 0o644, []byte("v\n")), convtest.File("w", 0o644, []byte("old w\n"))),
			convtest.Layer(t, convtest.Hardlink("l", "t"), convtest.File("l", 0o644, []byte("new l\n")), convtest.Hardlink("m", "u"), convtest.Whiteout("m"),
				convtest.Hardlink("d/k", "v"), convtest.File("d", 0o644, []byte("d\n")), convtest.Hardlink("x", "w"), convtest.File("w", 0o644, []byte("new w\n"))),
		}
		takenRef := ref(t, reg.host, repo+":taken")
		pushImage(t, takenRef, convtest.Image(t, "amd64", takenLayers...))
		mustConvert(t, takenRef.String(), reg.host+"/"+repo+":taken-flat", convert.ImageOptions{Flatten: true}, oci.Remote{})
		takenImg, _ := remoteImage(t, ref(t, reg.host, repo+":taken-flat"))
		takenTree := convtest.TreeFromDir(t, convtest.MountStack(t, convtest.RawLayers(t, takenImg, t.TempDir())))
		convtest.ReportDiff(t, "fstree.Stack vs the mounted flattened links", fstree.Diff(stackTree(t, takenLayers), takenTree, fstree.DiffOptions{IgnoreImpliedMtime: true}))
		if x := takenTree.Node("x"); x == nil || x.Digest != sha256.Sum256([]byte("old w\n")) {
			t.Errorf("x, linked to the lower w before its layer replaced w: %+v", x)
		}
		// Links to what their layer removed, made a directory, or gives
		// only after them: docker fails at each (review 23), also where
		// an upper layer hides it all.
		for i, tc := range []struct {
			lower, upper []convtest.Entry
			want         string
		}{
			{[]convtest.Entry{convtest.Dir("d", 0o755), convtest.File("d/x", 0o644, nil)}, []convtest.Entry{convtest.Whiteout("d"), convtest.Hardlink("l", "d/x")}, `hard link to "d/x", which its layer removed`},
			{[]convtest.Entry{convtest.Dir("d", 0o755), convtest.File("d/x", 0o644, nil)}, []convtest.Entry{convtest.File("d", 0o644, nil), convtest.Hardlink("l", "d/x")}, `hard link to "d/x": "d" is not a directory`},
			{[]convtest.Entry{convtest.File("x", 0o644, nil)}, []convtest.Entry{convtest.Dir("x", 0o755), convtest.Hardlink("l", "x")}, `directory "x"`},
			{[]convtest.Entry{convtest.File("x", 0o644, nil)}, []convtest.Entry{convtest.Whiteout("x"), convtest.File("x/y", 0o644, nil), convtest.Hardlink("l", "x")}, `directory "x"`},
			{[]convtest.Entry{convtest.File("a", 0o644, nil)}, []convtest.Entry{convtest.Hardlink("l", "t"), convtest.File("t", 0o644, nil)}, `entry "l": hard link to "t", which no layer has`},
		} {
			for _, hidden := range []bool{false, true} {
				layers := []v1.Layer{convtest.Layer(t, append([]convtest.Entry{convtest.Dir(".", 0o755)}, tc.lower...)...), convtest.Layer(t, tc.upper...)}
				if hidden {
					layers = append(layers, convtest.Layer(t, convtest.Whiteout("l"), convtest.Whiteout("d"), convtest.Whiteout("x"), convtest.Whiteout("t")))
				}
				tag := fmt.Sprintf(":link%d-%v", i, hidden)
				pushImage(t, ref(t, reg.host, repo+tag), convtest.Image(t, "amd64", layers...))
				_, err = convertRef(context.Background(), t, reg.host+"/"+repo+tag, reg.host+"/"+repo+tag+"-flat", convert.ImageOptions{Flatten: true}, oci.Remote{})
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("flattening link case %d (hidden above: %v): err = %v, want %s", i, hidden, err, tc.want)
				}
			}
		}
		// Review 23v: what the layer did to a hidden link's target, or to
		// a hidden file, counts too; so does its opaque marker above a
		// link's target.
		for i, tc := range []struct {
			layers []v1.Layer
			want   string // "": valid, the mount must show fstree.Stack's tree
		}{
			{[]v1.Layer{convtest.Layer(t, convtest.Dir(".", 0o755), convtest.Dir("b", 0o755), convtest.Hardlink("a", "b")), convtest.Layer(t, convtest.File("a", 0o644, nil))}, `hard link to the directory "b"`},
			{[]v1.Layer{convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("d/x", 0o644, nil), convtest.Whiteout("d"), convtest.Hardlink("l", "d/x")), convtest.Layer(t, convtest.Dir("d/x", 0o755))}, `hard link to "d/x", which its layer removed`},
			{[]v1.Layer{convtest.Layer(t, convtest.Dir(".", 0o755), convtest.Dir("d", 0o755), convtest.File("d/x", 0o644, nil)), convtest.Layer(t, convtest.Opaque("d"), convtest.Hardlink("l", "d/x"))}, `hard link to "d/x", which its layer removed`},
			// A link to a file the layer replaced by a device 0:0 is a
			// whiteout, also where the file was hidden.
			{[]v1.Layer{convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("a", 0o644, nil)),
				convtest.Layer(t, convtest.File("d/x", 0o644, []byte("x\n")), convtest.Node("d/x", tar.TypeChar, 0o644, 0, 0), convtest.Hardlink("b", "d/x")), convtest.Layer(t, convtest.Whiteout("d"))}, ""},
		} {
			tag := fmt.Sprintf(":v%d", i)
			pushImage(t, ref(t, reg.host, repo+tag), convtest.Image(t, "amd64", tc.layers...))
			_, err = convertRef(context.Background(), t, reg.host+"/"+repo+tag, reg.host+"/"+repo+tag+"-flat", convert.ImageOptions{Flatten: true}, oci.Remote{})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("flattening case v%d: err = %v, want %s", i, err, tc.want)
				}
				continue
			}
			must(t, err)
			img, _ := remoteImage(t, ref(t, reg.host, repo+tag+"-flat"))
			convtest.ReportDiff(t, fmt.Sprintf("case v%d: fstree.Stack vs the mounted flattened image", i), fstree.Diff(stackTree(t, tc.layers), convtest.TreeFromDir(t, convtest.MountStack(t, convtest.RawLayers(t, img, t.TempDir()))), fstree.DiffOptions{IgnoreImpliedMtime: true}))
		}
		// The same, where an upper layer's hidden link needs t too: that
		// the layer gives t serves the upper link, not its own.
		needs := convtest.Image(t, "amd64", convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("a", 0o644, nil)),
			convtest.Layer(t, convtest.Hardlink("l", "t"), convtest.File("t", 0o644, nil)), convtest.Layer(t, convtest.Hardlink("m", "t")), convtest.Layer(t, convtest.Whiteout("m"), convtest.Whiteout("l")))
		pushImage(t, ref(t, reg.host, repo+":needs"), needs)
		_, err = convertRef(context.Background(), t, reg.host+"/"+repo+":needs", reg.host+"/"+repo+":needs-flat", convert.ImageOptions{Flatten: true}, oci.Remote{})
		if err == nil || !strings.Contains(err.Error(), `entry "l": hard link to "t", which no layer has`) {
			t.Errorf("flattening a hidden link to its layer's later file, needed above too: err = %v", err)
		}
		// A lower layer whose root is a file, under an upper layer that
		// lists the root: docker fails at it, as the others do.
		rootFile := convtest.Image(t, "amd64", convtest.Layer(t, convtest.File(".", 0o644, []byte("r\n"))), convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("a", 0o644, nil)))
		rootRef := ref(t, reg.host, repo+":root-file")
		pushImage(t, rootRef, rootFile)
		if _, err := convertRef(context.Background(), t, rootRef.String(), reg.host+"/"+repo+":root-file-flat", convert.ImageOptions{Flatten: true}, oci.Remote{}); err == nil || !strings.Contains(err.Error(), "the root must be a directory") {
			t.Errorf("flattening over a root that is a file: %v", err)
		}
		// A PAX global header names no file, so one named below a file
		// is no entry there (the stacked conversion and fstree take it).
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "./", Mode: 0o755}))
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "f", Mode: 0o644}))
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeXGlobalHeader, Name: "f/g", Format: tar.FormatPAX, PAXRecords: map[string]string{"comment": "x"}}))
		must(t, tw.Close())
		global := &convtest.BlobLayer{Blob: convtest.Gzip(t, buf.Bytes()), Diff: convtest.SHA256(buf.Bytes()), Type: types.OCILayer}
		globalRef := ref(t, reg.host, repo+":global")
		pushImage(t, globalRef, convtest.Image(t, "amd64", global))
		if _, err := convertRef(context.Background(), t, globalRef.String(), reg.host+"/"+repo+":global-flat", convert.ImageOptions{Flatten: true}, oci.Remote{}); err != nil {
			t.Errorf("flattening a global header below a file: %v", err)
		}
	})

	// Content repeated across layers is stored once: whole files by
	// default, chunks of a file that only partly repeats with a chunk size.
	t.Run("shared content stored once", func(t *testing.T) {
		lib := convtest.RandomBytes(21, 1<<20)
		grown := append(append([]byte(nil), lib...), convtest.RandomBytes(22, 100_000)...)
		layers := []v1.Layer{
			convtest.Layer(t, convtest.Dir(".", 0o755), convtest.File("lib.so", 0o644, lib)),
			convtest.Layer(t, convtest.File("copy/lib.so", 0o644, lib), convtest.File("v2/lib.so", 0o644, grown)),
			convtest.Layer(t, convtest.File("again/lib.so", 0o644, lib)),
		}
		dir := t.TempDir()
		srcRef, err := oci.ParseRef("oci:"+filepath.Join(dir, "src")+":v1", false)
		must(t, err)
		must(t, oci.Write(t.Context(), srcRef, convtest.Image(t, "amd64", layers...), nil, oci.Remote{}))
		for _, tc := range []struct {
			name  string
			chunk int
			max   int64
		}{
			{"file dedupe", 0, 2<<20 + 256<<10},   // lib once, grown whole
			{"chunk 64K", 65536, 1<<20 + 256<<10}, // grown shares lib's chunks
		} {
			opt := convert.ImageOptions{Flatten: true}
			opt.Layer.Erofs.ChunkSize = tc.chunk
			tag := fmt.Sprintf("flat%d", tc.chunk)
			mustConvert(t, srcRef.String(), "oci:"+srcRef.Path+":"+tag, opt, oci.Remote{})
			art, err := oci.Get(t.Context(), oci.Ref{Kind: oci.Layout, Path: srcRef.Path, Tag: tag}, oci.Remote{})
			must(t, err)
			img := convtest.RawLayers(t, art.Image, t.TempDir())[0]
			st, err := os.Stat(img)
			must(t, err)
			if st.Size() > tc.max {
				t.Errorf("%s: flattened image of %d bytes, want at most %d: shared content stored more than once", tc.name, st.Size(), tc.max)
			}
			got := convtest.TreeFromDir(t, roundtrip.Mount(t, img))
			for p, want := range map[string][]byte{"lib.so": lib, "copy/lib.so": lib, "again/lib.so": lib, "v2/lib.so": grown} {
				if n := got.Node(p); n == nil || n.Digest != sha256.Sum256(want) {
					t.Errorf("%s: %s differs from the layer's", tc.name, p)
				}
			}
			t.Logf("%s: %d bytes for %d bytes of files", tc.name, st.Size(), 3*len(lib)+len(grown))
		}
	})

	// What an upper layer hides is not written: 1 MiB of random "big" in
	// layer 1 is replaced by layer 2, so the image is far smaller than it.
	t.Run("hidden content not written", func(t *testing.T) {
		src := convtest.Image(t, "amd64", flattenEdgeLayers(t)...)
		dir := t.TempDir()
		srcRef, err := oci.ParseRef("oci:"+filepath.Join(dir, "src")+":v1", false)
		must(t, err)
		must(t, oci.Write(t.Context(), srcRef, src, nil, oci.Remote{}))
		mustConvert(t, srcRef.String(), "", convert.ImageOptions{Flatten: true}, oci.Remote{})
		art, err := oci.Get(t.Context(), oci.Ref{Kind: oci.Layout, Path: srcRef.Path, Tag: "v1-erofs"}, oci.Remote{})
		must(t, err)
		layers := convtest.RawLayers(t, art.Image, t.TempDir())
		st, err := os.Stat(layers[0])
		must(t, err)
		if st.Size() > 256<<10 {
			t.Errorf("flattened image is %d bytes: the hidden 1 MiB file was written", st.Size())
		}
		img := openErofs(t, layers[0])
		for p, want := range map[string]string{
			"l1": "old content, kept by the links\n",
			"t":  "new content\n",
			"d":  "a file where d/ was\n",
		} {
			b, err := img.ReadFile(p)
			if err != nil || string(b) != want {
				t.Errorf("%s: %q, %v; want %q", p, b, err, want)
			}
		}
		for _, p := range []string{"gone", "l2", "a/x", "a/sub", "d/child"} {
			if _, err := img.Lstat(p); err == nil {
				t.Errorf("%s is in the flattened image", p)
			}
		}
	})
}

// checkNoWhiteouts fails if the image keeps a whiteout (char 0:0) or an
// overlayfs xattr.
func checkNoWhiteouts(t testing.TB, path string) {
	t.Helper()
	img := openErofs(t, path)
	tree := roundtrip.ProjectTree(t, path)
	for _, p := range tree.Paths() {
		ino, err := img.Lstat(p)
		must(t, err)
		if ino.Mode&erofs.S_IFMT == erofs.S_IFCHR && ino.Devmajor == 0 && ino.Devminor == 0 {
			t.Errorf("%s: a whiteout is left in the flattened image", p)
		}
		xs, err := img.Xattrs(p)
		must(t, err)
		for _, x := range xs {
			if strings.HasPrefix(x.Name, "trusted.overlay.") {
				t.Errorf("%s: xattr %s left in the flattened image", p, x.Name)
			}
		}
	}
}

func openErofs(t testing.TB, path string) *erofs.Image {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	must(t, err)
	img, err := erofs.Open(f, st.Size())
	must(t, err)
	return img
}

// diffTrees compares two mounted trees, overlayfs' own xattrs aside.
func diffTrees(want, got *fstree.Tree) []string {
	return fstree.Diff(want, got, fstree.DiffOptions{Ignore: func(p, field string) bool {
		return strings.HasPrefix(field, "xattr:trusted.overlay.")
	}})
}
