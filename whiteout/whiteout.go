// Package whiteout decides how OCI layers stack: what a layer's tar
// entries, in order, do to one another and to the layers below (Layer, a
// layer's change set), what the layers show stacked (Tree.Apply), and what
// a layer's image must hold for overlayfs to show the same (Layer.Overlay):
// docker's and containerd's rules, the kernel's overlayfs where they differ.
//
//	stack := whiteout.NewTree()
//	for _, layer := range layers {
//		l := whiteout.NewLayer(whiteout.Overlay)
//		for _, h := range layer { err = l.Add(h) } // tar headers in order
//		own, err := l.Overlay(stack)            // whiteout devices, opaque dirs, implied dirs
//		err = stack.Apply(l)                     // the merged tree, or the entry refused
//	}
//
// In an OCI tar layer, "dir/.wh.NAME" deletes NAME from the layers below and
// "dir/.wh..wh..opq" hides everything below dir. overlayfs, which stacks the
// EROFS layers on a node, spells the same as a character device 0:0 named
// NAME and as the xattr trusted.overlay.opaque="y" on dir. A directory that
// holds whiteout devices also gets an empty trusted.overlay.origin, as
// mkfs.erofs --aufs does, so overlayfs never shows the devices through a
// directory it does not merge. Translator names a tar entry's kind as a
// converter streams it.
package whiteout

import (
	"fmt"
	"path"
	"strings"
)

// Names and xattrs of both spellings.
const (
	Prefix       = ".wh."
	MetaPrefix   = ".wh..wh."
	OpaqueMarker = ".wh..wh..opq"

	OpaqueXattr        = "trusted.overlay.opaque"
	OriginXattr        = "trusted.overlay.origin"
	OverlayXattrPrefix = "trusted.overlay."
)

// Mode selects what the translator does with OCI whiteouts.
type Mode int

const (
	// Overlay turns whiteouts into their overlayfs form (the default).
	Overlay Mode = iota
	// Keep leaves the tar as it is: .wh. files stay regular files.
	Keep
)

// ParseMode parses "overlay" or "keep".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "", "overlay":
		return Overlay, nil
	case "keep":
		return Keep, nil
	}
	return 0, fmt.Errorf("whiteouts %q: want overlay or keep", s)
}

func (m Mode) String() string {
	if m == Keep {
		return "keep"
	}
	return "overlay"
}

// Kind is what a tar entry is under the whiteout rules.
type Kind int

const (
	Plain    Kind = iota // an ordinary entry
	Whiteout             // deletes Target; becomes a char device 0:0 there
	Opaque               // marks its directory opaque; not stored itself
	Drop                 // another .wh..wh. meta entry: not stored
)

// Translator classifies entries as a converter streams them, and
// remembers what the layer whited out.
type Translator struct {
	mode   Mode
	whited map[string]bool // the paths whited out
}

// NewTranslator returns a Translator for one layer.
func NewTranslator(m Mode) *Translator {
	return &Translator{mode: m, whited: map[string]bool{}}
}

// Mode is the translator's Mode.
func (t *Translator) Mode() Mode { return t.mode }

// WhitedOut reports whether the layer has whited out p so far.
func (t *Translator) WhitedOut(p string) bool { return t.whited[p] }

// AnyWhitedOut reports whether the layer has whited out anything so far.
func (t *Translator) AnyWhitedOut() bool { return len(t.whited) > 0 }

// Device records a character device 0:0 at p, which overlayfs takes for a
// whiteout wherever it finds one: in a layer of the stack, and in the
// upper directory a runtime extracts a layer into. Unless whiteouts are
// kept, the layer has whited out p (WhitedOut) and Device returns true;
// the device stays as the tar has it, as mkfs.erofs --aufs keeps it.
func (t *Translator) Device(p string) bool {
	if t.mode == Keep {
		return false
	}
	t.whited[p] = true
	return true
}

// KeepXattr reports whether an xattr of a tar entry is stored. The
// overlayfs ones (trusted.overlay.*: opaque, redirect, origin, metacopy)
// are not unless whiteouts are kept: overlayfs acts on them in a layer,
// where only the tar's whiteouts may say what the layer hides, and an
// upper layer's redirect could show a directory a whiteout deleted.
func (t *Translator) KeepXattr(name string) bool { return t.mode.KeepXattr(name) }

// KeepXattr reports whether a layer read in mode m keeps an xattr of a
// tar entry: not overlayfs's own (Translator.KeepXattr), unless
// whiteouts are kept.
func (m Mode) KeepXattr(name string) bool {
	return m == Keep || !strings.HasPrefix(name, OverlayXattrPrefix)
}

// Classify looks at a cleaned entry path ("a/b/.wh.c"). For a Whiteout it
// returns the path of the deleted entry; for Opaque, the directory.
func (t *Translator) Classify(p string) (Kind, string, error) {
	if t.mode == Keep {
		return Plain, p, nil
	}
	dir, base := path.Split(p)
	dir = strings.TrimSuffix(dir, "/")
	switch {
	case base == OpaqueMarker:
		return Opaque, dir, nil
	case strings.HasPrefix(base, MetaPrefix):
		return Drop, "", nil
	case strings.HasPrefix(base, Prefix):
		name := base[len(Prefix):]
		if name == "" || name == "." || name == ".." {
			return 0, "", fmt.Errorf("whiteout %q names no entry", p)
		}
		target := path.Join(dir, name)
		t.whited[target] = true
		return Whiteout, target, nil
	}
	return Plain, p, nil
}

// DirXattr is an xattr to set on a directory after the layer is read.
type DirXattr struct {
	Dir, Name string
	Value     []byte
}
