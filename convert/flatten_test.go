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
	"github.com/ocierofs/ocierofs/convert/internal/roundtrip"
	"github.com/ocierofs/ocierofs/erofs"
	"github.com/ocierofs/ocierofs/oci"
)

// flattenEdgeLayers are layers that make flattening hard: content replaced
// under a hard link, files replaced and deleted, a directory replaced by a
// file, an opaque directory whose own entry comes from below, and big
// content an upper layer hides.
func flattenEdgeLayers(t testing.TB) []v1.Layer {
	big := randomBytes(11, 1<<20)
	return []v1.Layer{
		e2eLayer(t,
			eDir(".", 0o755),
			eDir("etc", 0o750).at(e2eTime.Add(-time.Hour)).xattr("user.flat", "etc"),
			eFile("etc/conf", 0o644, []byte("v1\n")),
			eFile("big", 0o644, big),
			eFile("t", 0o644, []byte("old content, kept by the links\n")),
			eLink("l1", "t"),
			eLink("l2", "t"),
			eFile("gone", 0o644, []byte("whited out\n")),
			eDir("d", 0o700),
			eFile("d/child", 0o644, []byte("under a directory replaced by a file\n")),
			eDir("a", 0o711).own(5, 6),
			eFile("a/x", 0o644, []byte("hidden by the opaque a/\n")),
			eDir("a/sub", 0o755),
			eFile("a/sub/y", 0o644, []byte("hidden too\n")),
			eDir("keep", 0o755),
			eFile("keep/k", 0o644, []byte("stays\n")),
		),
		e2eLayer(t,
			eFile("big", 0o644, []byte("small now\n")),
			eFile("t", 0o600, []byte("new content\n")),
			eWhiteout("gone"),
			eFile("d", 0o644, []byte("a file where d/ was\n")),
			// a/ is not listed here: its metadata is layer 1's.
			eOpaque("a"),
			eFile("a/new", 0o644, []byte("the only file of a/\n")),
		),
		e2eLayer(t,
			// etc/ implied again: still layer 1's metadata.
			eFile("etc/more", 0o644, []byte("from layer 3\n")),
			eFile("keep/k2", 0o644, []byte("beside k\n")),
			eWhiteout("l2"),
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
		e2eLayer(t,
			eDir(".", 0o755),
			eFile("h1", 0o644, []byte("hard-link-content\n")),
			eLink("h2", "h1"),
			eDir("w", 0o755), eFile("w/old", 0o644, []byte("deleted in layer 2\n")),
			eDir("dd", 0o755), eFile("dd/k", 0o644, []byte("replaced in layer 2\n")),
			// Nothing below p/-sub: umoci, the reference, would delete it
			// for the opaque p/ and leave the directory's mtime at now.
			eDir("p", 0o755), eDir("p/-sub", 0o755), eFile("p/other", 0o644, []byte("hidden by the opaque p/\n")),
		),
		e2eLayer(t,
			eWhiteout("h1"),
			eFile("x", 0o644, []byte("MIDDLE-LAYER-DATA\n")),
			eWhiteout("w"),
			eFile("dd", 0o644, []byte("a file for now\n")),
			eDir("p", 0o755),
			eDir("p/-sub", 0o700).own(5, 6).at(e2eTime.Add(-48*time.Hour)).xattr("user.s", "v"),
			eOpaque("p"),
		),
		e2eLayer(t,
			eFile("x", 0o644, []byte("top\n")),
			eDir("w", 0o755), eFile("w/new", 0o644, []byte("new\n")),
			eDir("dd", 0o755), eFile("dd/m", 0o644, []byte("m\n")),
			eFile("p/-sub/f3", 0o644, []byte("under an implied p/-sub\n")),
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
	root := eDir(".", 0o755)
	return []stackCase{
		{"opaque makes its directory", []v1.Layer{
			e2eLayer(t, root, eFile("a", 0o644, []byte("a\n"))),
			e2eLayer(t, eOpaque("d")),
		}},
		{"whiteout makes its directory", []v1.Layer{
			e2eLayer(t, root, eFile("a", 0o644, []byte("a\n"))),
			e2eLayer(t, eWhiteout("d/x")),
		}},
		{"directory then file then implied directory", []v1.Layer{
			e2eLayer(t, root, eDir("d", 0o700), eFile("d/x", 0o644, []byte("x\n"))),
			e2eLayer(t, eFile("d", 0o644, []byte("f\n"))),
			e2eLayer(t, eFile("d/y", 0o644, []byte("y\n"))),
		}},
		{"whiteout then implied directory", []v1.Layer{
			e2eLayer(t, root, eDir("d", 0o700).own(1, 1), eFile("d/x", 0o644, []byte("x\n"))),
			e2eLayer(t, eWhiteout("d")),
			e2eLayer(t, eFile("d/y", 0o644, []byte("y\n"))),
		}},
		{"opaque then implied directory", []v1.Layer{
			e2eLayer(t, root, eDir("d", 0o700).own(1, 1).xattr("user.k", "v"), eFile("d/x", 0o644, []byte("x\n"))),
			e2eLayer(t, eOpaque("d"), eFile("d/z", 0o644, []byte("z\n"))),
			e2eLayer(t, eFile("d/y", 0o644, []byte("y\n"))),
		}},
		{"opaque after an implied child", []v1.Layer{
			e2eLayer(t, root, eDir("o", 0o755), eDir("o/-sub", 0o700), eFile("o/-sub/x", 0o644, []byte("x\n"))),
			e2eLayer(t, eFile("o/-sub/y", 0o644, []byte("y\n")), eOpaque("o")),
		}},
		{"opaque after a declared child", []v1.Layer{
			e2eLayer(t, root, eDir("o", 0o755), eDir("o/-sub", 0o755), eFile("o/-sub/x", 0o644, []byte("x\n"))),
			e2eLayer(t, eDir("o/-sub", 0o711), eFile("o/-sub/y", 0o644, []byte("y\n")), eOpaque("o")),
		}},
		{"overlay xattr in the tar", []v1.Layer{
			e2eLayer(t, root, eDir("d", 0o755).xattr("trusted.overlay.opaque", "y"), eFile("d/x", 0o644, []byte("x\n"))),
			e2eLayer(t, eFile("d/y", 0o644, []byte("y\n"))),
		}},
		{"deleted and implied again in one layer", []v1.Layer{
			e2eLayer(t, root, eDir("d", 0o700).own(1, 1), eFile("d/x", 0o644, []byte("x\n")), eDir("a", 0o700), eFile("a/b", 0o644, []byte("b\n"))),
			// d listed again after its entry: still opaque.
			e2eLayer(t, eWhiteout("d"), eFile("d/n", 0o644, []byte("n\n")), eDir("d", 0o711), eWhiteout("a"), eFile("a/b/y", 0o644, []byte("y\n"))),
		}},
		{"deleted and made again in one layer", []v1.Layer{
			e2eLayer(t, root, eDir("d", 0o700), eFile("d/x", 0o644, []byte("x\n")), eDir("e", 0o700), eFile("e/w", 0o644, []byte("w\n"))),
			// e with a file in between.
			e2eLayer(t, eWhiteout("d"), eDir("d", 0o755), eFile("d/y", 0o644, []byte("y\n")),
				eWhiteout("e"), eFile("e", 0o644, []byte("e\n")), eDir("e", 0o755), eFile("e/z", 0o644, []byte("z\n"))),
		}},
		// Review 21-b's B: a whiteout after the layer's own entries at
		// its path deletes them too, as docker, containerd and
		// mkfs.erofs --aufs apply it; d implied above is a new one.
		{"entries before their whiteout in one layer", []v1.Layer{
			e2eLayer(t, root, eDir("d", 0o700), eFile("d/x", 0o644, []byte("x\n")), eFile("f", 0o644, []byte("f\n")),
				eDir("e", 0o700), eFile("e/w", 0o644, []byte("w\n"))),
			e2eLayer(t, eDir("d", 0o711).own(2, 2), eFile("d/y", 0o644, []byte("y\n")), eWhiteout("d"),
				eFile("f", 0o600, []byte("new f\n")), eWhiteout("f"),
				eFile("e/z", 0o644, []byte("z\n")), eWhiteout("e"), eFile("e/q", 0o644, []byte("q\n"))),
			e2eLayer(t, eFile("d/n", 0o644, []byte("n\n"))),
		}},
		// 21-b's C: a file, then a directory at one path in one layer:
		// the lower directory went with the file.
		{"file then directory in one layer", []v1.Layer{
			e2eLayer(t, root, eDir("d", 0o700), eFile("d/x", 0o644, []byte("x\n"))),
			e2eLayer(t, eFile("d", 0o644, []byte("d\n")), eDir("d", 0o755), eFile("d/y", 0o644, []byte("y\n"))),
		}},
		// 21-b's E: overlayfs's own xattrs in a tar are left out: the
		// lower d/x shows through the upper d.
		{"overlay xattrs on an upper directory", []v1.Layer{
			e2eLayer(t, root, eDir("d", 0o755), eFile("d/x", 0o644, []byte("x\n")), eDir("e", 0o755), eFile("e/w", 0o644, []byte("w\n"))),
			e2eLayer(t, eDir("d", 0o755).xattr("trusted.overlay.opaque", "y"), eFile("d/y", 0o644, []byte("y\n")),
				eDir("r", 0o755).xattr("trusted.overlay.redirect", "/e")),
		}},
		// 21-b's D: an opaque marker on the root, which overlayfs
		// ignores there: the stacked layer whites out what the layers
		// below have at the root instead.
		{"opaque root", []v1.Layer{
			e2eLayer(t, root, eFile("a", 0o644, []byte("a\n")), eDir("d", 0o755), eFile("d/x", 0o644, []byte("x\n")), eFile("e/w", 0o644, nil)),
			e2eLayer(t, eFile("f", 0o644, []byte("f\n")), eWhiteout("a")),
			e2eLayer(t, eFile("b", 0o644, []byte("b\n")), eFile("d/y", 0o644, []byte("y\n")), eFile("./.wh..wh..opq", 0, nil)),
			e2eLayer(t, eFile("c", 0o644, []byte("c\n"))),
		}},
		// Campaign 22: a directory a layer implies, then declares,
		// under its own opaque marker: the declared metadata.
		{"implied then declared under an opaque marker", []v1.Layer{
			e2eLayer(t, root, eDir("d", 0o755), eDir("d/b", 0o755), eFile("d/b/w", 0o644, nil)),
			e2eLayer(t, eFile("d/b/x", 0o644, nil), eOpaque("d"), eDir("d/b", 0o711)),
		}},
		// Campaign 22: a layer with an opaque root over another; the
		// lower one's d, made by its marker, goes too.
		{"opaque root over an opaque root", []v1.Layer{
			e2eLayer(t, root, eFile("x", 0o644, nil)),
			e2eLayer(t, eFile("a", 0o644, nil), eOpaque("d"), eFile("./.wh..wh..opq", 0, nil)),
			e2eLayer(t, eFile("./.wh..wh..opq", 0, nil), eFile("e", 0o644, []byte("e\n")), eFile("f", 0o644, nil)),
		}},
		// Campaign 22: an opaque marker in a directory its layer whited
		// out: a new, empty directory (the stacked conversion failed).
		{"opaque marker under its own whiteout", []v1.Layer{
			e2eLayer(t, root, eDir("b", 0o700), eFile("b/x", 0o644, nil)),
			e2eLayer(t, eWhiteout("b"), eOpaque("b"), eFile("c", 0o644, nil)),
		}},
		// 21-b's F: a character device 0:0 is what overlayfs takes for
		// a whiteout, in the stacked image and below a container's
		// upper directory alike: it deletes the lower x and does not show.
		{"character device 0:0", []v1.Layer{
			e2eLayer(t, root, eFile("x", 0o644, []byte("x\n")), eDir("d", 0o755), eFile("d/w", 0o644, []byte("w\n")), eFile("z", 0o644, nil),
				eDir("e", 0o700), eFile("e/w", 0o644, []byte("w\n"))),
			// e deleted, then made again by an entry in it.
			e2eLayer(t, eNode("x", tar.TypeChar, 0o600, 0, 0), eNode("d", tar.TypeChar, 0o600, 0, 0), eFile("y", 0o644, []byte("y\n")),
				eNode("e", tar.TypeChar, 0o600, 0, 0), eFile("e/n", 0o644, []byte("n\n")),
				// In a directory new in the layer: not listed either
				// (its directory gets the origin marker).
				eDir("n", 0o755), eNode("n/w", tar.TypeChar, 0o600, 0, 0), eFile("n/f", 0o644, []byte("f\n"))),
		}},
		// Review 22-d: a hard link to a whiteout, as overlayfs makes
		// them (a tar of an upper directory), is a whiteout too.
		{"hard links to whiteouts", []v1.Layer{
			e2eLayer(t, root, eFile("a", 0o644, nil), eFile("z", 0o644, []byte("z\n")), eDir("m", 0o755), eFile("m/k", 0o644, nil)),
			e2eLayer(t, eNode("x", tar.TypeChar, 0o600, 0, 0), eDir("n", 0o755), eLink("n/y", "x"), eFile("n/f", 0o644, nil),
				eWhiteout("z"), eLink("m/k", "z"), eLink("n/w", "m/k")),
		}},
		// Review 22-b: the flattener materializes a hidden file at its
		// first link; the layer then removes or replaces that link, and
		// the next links still get the hidden content.
		{"links to a hidden file whose first link goes", []v1.Layer{
			e2eLayer(t, root, eFile("h", 0o644, []byte("h0\n"))),
			e2eLayer(t, eFile("h", 0o644, []byte("h1\n")), eDir("d", 0o755), eLink("d/l", "h"), eWhiteout("d"),
				eLink("m", "h"), eFile("m", 0o644, []byte("m\n")), // replaced by a file
				eLink("n", "h"), eFile("z", 0o644, []byte("z\n")), eLink("n", "z"), // by a link to another
				eLink("o", "h"), eLink("p", "o")),
			e2eLayer(t, eFile("h", 0o644, []byte("h2\n"))),
		}},
		// Campaign 22's class A, the valid side: entries below a path
		// where the layer had a file or symlink, which it removed or
		// replaced by a directory first (also a directory above it), and
		// which an upper layer hides (d, p) or not (e, s).
		{"entries where the layer removed its file", []v1.Layer{
			e2eLayer(t, root, eFile("a", 0o644, nil)),
			e2eLayer(t, eFile("d", 0o644, nil), eWhiteout("d"), eFile("d/x", 0o644, []byte("x\n")),
				eSym("e", "x"), eDir("e", 0o755), eFile("e/y", 0o644, []byte("y\n")),
				eDir("p", 0o755), eFile("p/q", 0o644, nil), eWhiteout("p"), eFile("p/q/r", 0o644, []byte("r\n")),
				eFile("s/t", 0o644, nil), eFile("s", 0o644, nil), eDir("s", 0o755), eFile("s/t/u", 0o644, []byte("u\n"))),
			e2eLayer(t, eWhiteout("d"), eFile("p", 0o644, []byte("p\n"))),
		}},
		// Campaign 22's class G: a directory that holds only a whiteout
		// or an opaque marker of the layer, below its opaque marker (in
		// either order): it is in the layer's tree, and overlayfs shows
		// it, empty, as containerd's overlay applier and mkfs.erofs
		// --aufs leave it (docker's applier removes it).
		{"whiteouts and markers below an opaque marker", []v1.Layer{
			e2eLayer(t, root, eDir("p", 0o755), eDir("p/c", 0o700), eFile("p/c/b", 0o644, nil), eFile("p/c/x", 0o644, nil),
				eDir("p/e", 0o700), eFile("p/e/y", 0o644, nil), eDir("p/f", 0o700), eFile("p/f/z", 0o644, nil), eFile("p/w", 0o644, nil)),
			e2eLayer(t, eWhiteout("p/c/b"), eOpaque("p/e"), eOpaque("p"), eWhiteout("p/f/z"), eWhiteout("p/g/h")),
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
			src := e2eImage(t, "amd64", tc.layers...)
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
				got := treeFromDir(t, mountStack(t, rawLayers(t, img, t.TempDir())))
				reportDiff(t, fmt.Sprintf("fstree.Stack vs the mounted conversion (flatten %v)", opt.Flatten), fstree.Diff(want, got, ignore))
				mounted = append(mounted, got)
			}
			reportDiff(t, "stacked vs flattened, mounted", fstree.Diff(mounted[0], mounted[1], fstree.DiffOptions{Ignore: ignore.Ignore}))
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
		{"test image", testImageLayers(t)},
		{"edge cases", flattenEdgeLayers(t)},
		{"deleted and made again", restackLayers(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := e2eImage(t, "amd64", tc.layers...)
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
			layers := rawLayers(t, got, t.TempDir())
			checkNoWhiteouts(t, layers[0])
			compareWithUmoci(t, src, layers)

			// The same tree as the stacked (not flattened) conversion.
			stacked := mustConvert(t, srcRef.String(), reg.host+"/"+repo+":stacked", convert.ImageOptions{}, oci.Remote{})
			simg, _ := remoteImage(t, ref(t, reg.host, repo+":stacked"))
			want := treeFromDir(t, mountStack(t, rawLayers(t, simg, t.TempDir())))
			flat := treeFromDir(t, mountStack(t, layers))
			reportDiff(t, "flattened vs stacked", diffTrees(want, flat))
			t.Logf("stacked %s, flattened %s: %d paths", stacked.digest, res.digest, flat.Len())
		})
	}

	// Hard links to files of lower layers, as docker and containerd apply
	// them (into the tree below): flattened, they are links to the lower
	// file, or copies of its content where an upper layer replaced or
	// deleted it. A stacked conversion refuses them, as mkfs.erofs does:
	// one layer's image cannot link into another's.
	t.Run("links to lower layers", func(t *testing.T) {
		src := e2eImage(t, "amd64",
			e2eLayer(t, eDir(".", 0o755), eDir("bin", 0o755), eFile("bin/busybox", 0o755, []byte("#!busybox\n")),
				eFile("t", 0o644, []byte("old t\n")), eFile("z", 0o600, []byte("z, deleted above\n"))),
			e2eLayer(t, eLink("hl", "bin/busybox"), eLink("ht", "t"), eLink("hz", "z")),
			e2eLayer(t, eFile("t", 0o644, []byte("new t\n")), eWhiteout("z"), eLink("hl2", "hl"),
				// A link to a link that the layer above replaces.
				eFile("q", 0o644, []byte("q\n")), eLink("qh", "q"), eLink("qk", "qh")),
			e2eLayer(t, eFile("qh", 0o644, []byte("qh replaced\n"))),
		)
		repo := uniq("e2e/flatten-links")
		srcRef := ref(t, reg.host, repo+":v1")
		pushImage(t, srcRef, src)
		res := mustConvert(t, srcRef.String(), "", convert.ImageOptions{Flatten: true}, oci.Remote{})
		got, _ := remoteImage(t, ref(t, reg.host, repo+":v1-erofs"))
		_, flat := compareWithUmoci(t, src, rawLayers(t, got, t.TempDir()))
		t.Logf("flattened %s: %d paths", res.digest, flat.Len())
		_, err := convertRef(context.Background(), t, srcRef.String(), reg.host+"/"+repo+":stacked", convert.ImageOptions{}, oci.Remote{})
		if err == nil || !strings.Contains(err.Error(), `hard link to "bin/busybox", a file of a layer below`) {
			t.Errorf("stacked conversion: err = %v, want a refusal of hl", err)
		}
		bad := e2eImage(t, "amd64", e2eLayer(t, eDir(".", 0o755), eFile("a", 0o644, nil)), e2eLayer(t, eLink("l", "nowhere")))
		badRef := ref(t, reg.host, repo+":bad")
		pushImage(t, badRef, bad)
		_, err = convertRef(context.Background(), t, badRef.String(), reg.host+"/"+repo+":bad-flat", convert.ImageOptions{Flatten: true}, oci.Remote{})
		if err == nil || !strings.Contains(err.Error(), `entry "l": hard link to "nowhere", which no layer has`) {
			t.Errorf("flattening a link to nothing: err = %v", err)
		}
		requireAbsent(t, ref(t, reg.host, repo+":bad-flat"))
		// Also where an upper layer hides the link: docker applies the
		// layer below it first, and fails (campaign 22).
		hidden := e2eImage(t, "amd64", e2eLayer(t, eDir(".", 0o755)), e2eLayer(t, eLink("d/d", "b")), e2eLayer(t, eWhiteout("d/d")))
		hiddenRef := ref(t, reg.host, repo+":hidden")
		pushImage(t, hiddenRef, hidden)
		_, err = convertRef(context.Background(), t, hiddenRef.String(), reg.host+"/"+repo+":hidden-flat", convert.ImageOptions{Flatten: true}, oci.Remote{})
		if err == nil || !strings.Contains(err.Error(), `entry "d/d": hard link to "b", which no layer has`) {
			t.Errorf("flattening a hidden link to nothing: err = %v", err)
		}
		// An entry below a non-directory of its own layer, where an
		// upper layer hides both: docker applies the layer first, and
		// fails there; so do the stacked conversion and fstree.Stack.
		for i, bad := range [][]e2eEntry{
			{eSym("d", "x/y"), eFile("d/c", 0o644, nil)},
			{eDir("d", 0o755), eFile("d/c", 0o644, nil), eWhiteout("d"), eFile("d", 0o644, nil), eWhiteout("d/c")},
			{eFile("d", 0o644, nil), eOpaque("d")},
		} {
			under := e2eImage(t, "amd64", e2eLayer(t, append([]e2eEntry{eDir(".", 0o755)}, bad...)...), e2eLayer(t, eFile("d", 0o644, nil)))
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
			e2eLayer(t, eDir(".", 0o755), eFile("t", 0o644, []byte("t\n")), eFile("u", 0o644, []byte("u\n")),
				eFile("v", 0o644, []byte("v\n")), eFile("w", 0o644, []byte("old w\n"))),
			e2eLayer(t, eLink("l", "t"), eFile("l", 0o644, []byte("new l\n")), eLink("m", "u"), eWhiteout("m"),
				eLink("d/k", "v"), eFile("d", 0o644, []byte("d\n")), eLink("x", "w"), eFile("w", 0o644, []byte("new w\n"))),
		}
		takenRef := ref(t, reg.host, repo+":taken")
		pushImage(t, takenRef, e2eImage(t, "amd64", takenLayers...))
		mustConvert(t, takenRef.String(), reg.host+"/"+repo+":taken-flat", convert.ImageOptions{Flatten: true}, oci.Remote{})
		takenImg, _ := remoteImage(t, ref(t, reg.host, repo+":taken-flat"))
		takenTree := treeFromDir(t, mountStack(t, rawLayers(t, takenImg, t.TempDir())))
		reportDiff(t, "fstree.Stack vs the mounted flattened links", fstree.Diff(stackTree(t, takenLayers), takenTree, fstree.DiffOptions{IgnoreImpliedMtime: true}))
		if x := takenTree.Node("x"); x == nil || x.Digest != sha256.Sum256([]byte("old w\n")) {
			t.Errorf("x, linked to the lower w before its layer replaced w: %+v", x)
		}
		// Links to what their layer removed, made a directory, or gives
		// only after them: docker fails at each (review 23), also where
		// an upper layer hides it all.
		for i, tc := range []struct {
			lower, upper []e2eEntry
			want         string
		}{
			{[]e2eEntry{eDir("d", 0o755), eFile("d/x", 0o644, nil)}, []e2eEntry{eWhiteout("d"), eLink("l", "d/x")}, `hard link to "d/x", which its layer removed`},
			{[]e2eEntry{eDir("d", 0o755), eFile("d/x", 0o644, nil)}, []e2eEntry{eFile("d", 0o644, nil), eLink("l", "d/x")}, `hard link to "d/x": "d" is not a directory`},
			{[]e2eEntry{eFile("x", 0o644, nil)}, []e2eEntry{eDir("x", 0o755), eLink("l", "x")}, `directory "x"`},
			{[]e2eEntry{eFile("x", 0o644, nil)}, []e2eEntry{eWhiteout("x"), eFile("x/y", 0o644, nil), eLink("l", "x")}, `directory "x"`},
			{[]e2eEntry{eFile("a", 0o644, nil)}, []e2eEntry{eLink("l", "t"), eFile("t", 0o644, nil)}, `entry "l": hard link to "t", which no layer has`},
		} {
			for _, hidden := range []bool{false, true} {
				layers := []v1.Layer{e2eLayer(t, append([]e2eEntry{eDir(".", 0o755)}, tc.lower...)...), e2eLayer(t, tc.upper...)}
				if hidden {
					layers = append(layers, e2eLayer(t, eWhiteout("l"), eWhiteout("d"), eWhiteout("x"), eWhiteout("t")))
				}
				tag := fmt.Sprintf(":link%d-%v", i, hidden)
				pushImage(t, ref(t, reg.host, repo+tag), e2eImage(t, "amd64", layers...))
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
			{[]v1.Layer{e2eLayer(t, eDir(".", 0o755), eDir("b", 0o755), eLink("a", "b")), e2eLayer(t, eFile("a", 0o644, nil))}, `hard link to the directory "b"`},
			{[]v1.Layer{e2eLayer(t, eDir(".", 0o755), eFile("d/x", 0o644, nil), eWhiteout("d"), eLink("l", "d/x")), e2eLayer(t, eDir("d/x", 0o755))}, `hard link to "d/x", which its layer removed`},
			{[]v1.Layer{e2eLayer(t, eDir(".", 0o755), eDir("d", 0o755), eFile("d/x", 0o644, nil)), e2eLayer(t, eOpaque("d"), eLink("l", "d/x"))}, `hard link to "d/x", which its layer removed`},
			// A link to a file the layer replaced by a device 0:0 is a
			// whiteout, also where the file was hidden.
			{[]v1.Layer{e2eLayer(t, eDir(".", 0o755), eFile("a", 0o644, nil)),
				e2eLayer(t, eFile("d/x", 0o644, []byte("x\n")), eNode("d/x", tar.TypeChar, 0o644, 0, 0), eLink("b", "d/x")), e2eLayer(t, eWhiteout("d"))}, ""},
		} {
			tag := fmt.Sprintf(":v%d", i)
			pushImage(t, ref(t, reg.host, repo+tag), e2eImage(t, "amd64", tc.layers...))
			_, err = convertRef(context.Background(), t, reg.host+"/"+repo+tag, reg.host+"/"+repo+tag+"-flat", convert.ImageOptions{Flatten: true}, oci.Remote{})
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("flattening case v%d: err = %v, want %s", i, err, tc.want)
				}
				continue
			}
			must(t, err)
			img, _ := remoteImage(t, ref(t, reg.host, repo+tag+"-flat"))
			reportDiff(t, fmt.Sprintf("case v%d: fstree.Stack vs the mounted flattened image", i), fstree.Diff(stackTree(t, tc.layers), treeFromDir(t, mountStack(t, rawLayers(t, img, t.TempDir()))), fstree.DiffOptions{IgnoreImpliedMtime: true}))
		}
		// The same, where an upper layer's hidden link needs t too: that
		// the layer gives t serves the upper link, not its own.
		needs := e2eImage(t, "amd64", e2eLayer(t, eDir(".", 0o755), eFile("a", 0o644, nil)),
			e2eLayer(t, eLink("l", "t"), eFile("t", 0o644, nil)), e2eLayer(t, eLink("m", "t")), e2eLayer(t, eWhiteout("m"), eWhiteout("l")))
		pushImage(t, ref(t, reg.host, repo+":needs"), needs)
		_, err = convertRef(context.Background(), t, reg.host+"/"+repo+":needs", reg.host+"/"+repo+":needs-flat", convert.ImageOptions{Flatten: true}, oci.Remote{})
		if err == nil || !strings.Contains(err.Error(), `entry "l": hard link to "t", which no layer has`) {
			t.Errorf("flattening a hidden link to its layer's later file, needed above too: err = %v", err)
		}
		// A lower layer whose root is a file, under an upper layer that
		// lists the root: docker fails at it, as the others do.
		rootFile := e2eImage(t, "amd64", e2eLayer(t, eFile(".", 0o644, []byte("r\n"))), e2eLayer(t, eDir(".", 0o755), eFile("a", 0o644, nil)))
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
		global := &blobLayer{blob: gzipBytes(t, buf.Bytes()), diffID: sha256Of(buf.Bytes()), mt: types.OCILayer}
		globalRef := ref(t, reg.host, repo+":global")
		pushImage(t, globalRef, e2eImage(t, "amd64", global))
		if _, err := convertRef(context.Background(), t, globalRef.String(), reg.host+"/"+repo+":global-flat", convert.ImageOptions{Flatten: true}, oci.Remote{}); err != nil {
			t.Errorf("flattening a global header below a file: %v", err)
		}
	})

	// Content repeated across layers is stored once: whole files by
	// default, chunks of a file that only partly repeats with a chunk size.
	t.Run("shared content stored once", func(t *testing.T) {
		lib := randomBytes(21, 1<<20)
		grown := append(append([]byte(nil), lib...), randomBytes(22, 100_000)...)
		layers := []v1.Layer{
			e2eLayer(t, eDir(".", 0o755), eFile("lib.so", 0o644, lib)),
			e2eLayer(t, eFile("copy/lib.so", 0o644, lib), eFile("v2/lib.so", 0o644, grown)),
			e2eLayer(t, eFile("again/lib.so", 0o644, lib)),
		}
		dir := t.TempDir()
		srcRef, err := oci.ParseRef("oci:"+filepath.Join(dir, "src")+":v1", false)
		must(t, err)
		must(t, oci.Write(t.Context(), srcRef, e2eImage(t, "amd64", layers...), nil, oci.Remote{}))
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
			img := rawLayers(t, art.Image, t.TempDir())[0]
			st, err := os.Stat(img)
			must(t, err)
			if st.Size() > tc.max {
				t.Errorf("%s: flattened image of %d bytes, want at most %d: shared content stored more than once", tc.name, st.Size(), tc.max)
			}
			got := treeFromDir(t, roundtrip.Mount(t, img))
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
		src := e2eImage(t, "amd64", flattenEdgeLayers(t)...)
		dir := t.TempDir()
		srcRef, err := oci.ParseRef("oci:"+filepath.Join(dir, "src")+":v1", false)
		must(t, err)
		must(t, oci.Write(t.Context(), srcRef, src, nil, oci.Remote{}))
		mustConvert(t, srcRef.String(), "", convert.ImageOptions{Flatten: true}, oci.Remote{})
		art, err := oci.Get(t.Context(), oci.Ref{Kind: oci.Layout, Path: srcRef.Path, Tag: "v1-erofs"}, oci.Remote{})
		must(t, err)
		layers := rawLayers(t, art.Image, t.TempDir())
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
