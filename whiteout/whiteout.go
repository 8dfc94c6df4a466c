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
// A converter that reads the layers from the top down (a flattener) asks
// each layer above whether it covers a path (Layer.Covers) before it
// writes the data of a file below.
//
// In an OCI tar layer, "dir/.wh.NAME" deletes NAME from the layers below and
// "dir/.wh..wh..opq" hides everything below dir. overlayfs, which stacks the
// EROFS layers on a node, spells the same as a character device 0:0 named
// NAME and as the xattr trusted.overlay.opaque="y" on dir. A directory that
// holds whiteout devices also gets an empty trusted.overlay.origin, as
// mkfs.erofs --aufs does, so overlayfs never shows the devices through a
// directory it does not merge. A layer already in that form, as an EROFS
// layer image holds it, is read with NewLayer(Lowerdir): that is how
// ocierofs merge stacks layer images.
package whiteout

import (
	"archive/tar"
	"encoding/base64"
	"fmt"
	"net/url"
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

// Mode selects how a Layer reads whiteouts: OCI's, turned into their
// overlayfs form (Overlay), none (Keep), or overlayfs's own (Lowerdir).
type Mode int

const (
	// Overlay turns whiteouts into their overlayfs form (the default).
	Overlay Mode = iota
	// Keep leaves the tar as it is: .wh. files stay regular files.
	Keep
	// Lowerdir reads a layer in overlayfs's form, as one of its lower
	// directories (an EROFS layer image) holds it: a character device 0:0
	// is a whiteout, a directory whose header has the PAX record
	// SCHILY.xattr.trusted.overlay.opaque=y is opaque, and .wh. names are
	// plain files. An opaque root is not, as overlayfs ignores it there.
	Lowerdir
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
	return [...]string{"overlay", "keep", "lowerdir"}[m]
}

// KeepXattr reports whether a layer read in mode m keeps an xattr of a
// tar entry. The overlayfs ones (trusted.overlay.*: opaque, redirect,
// origin, metacopy) are not unless whiteouts are kept: overlayfs acts on
// them in a layer, where only the tar's whiteouts may say what the layer
// hides, and an upper layer's redirect could show a directory a whiteout
// deleted.
func (m Mode) KeepXattr(name string) bool {
	return m == Keep || !strings.HasPrefix(name, OverlayXattrPrefix)
}

// Xattrs returns the xattrs of a tar header's PAX records, by name:
// SCHILY.xattr.NAME holds the raw value, LIBARCHIVE.xattr.NAME the name
// URL-escaped and the value in base64; SCHILY's wins where both name one.
// Which of them a layer keeps is KeepXattr's, and the format's, to say.
func Xattrs(h *tar.Header) (map[string]string, error) {
	var xs map[string]string
	set := func(k, v string) {
		if xs == nil {
			xs = map[string]string{}
		}
		xs[k] = v
	}
	for k, v := range h.PAXRecords {
		name, ok := strings.CutPrefix(k, "LIBARCHIVE.xattr.")
		if !ok {
			continue
		}
		name, err := url.PathUnescape(name)
		if err != nil {
			return nil, fmt.Errorf("pax record %q: %w", k, err)
		}
		b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(v, "="))
		if err != nil {
			return nil, fmt.Errorf("pax record %q: bad base64 value", k)
		}
		set(name, string(b))
	}
	for k, v := range h.PAXRecords {
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			set(name, v)
		}
	}
	return xs, nil
}
