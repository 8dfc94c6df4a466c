package erofs

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
)

// longPrefix is one entry of the long xattr name prefix table.
type longPrefix struct {
	prefix string // short prefix of the base index + infix
	ok     bool   // false if the base index names no visible namespace
}

// xattrBaseName returns the name prefix an e_name_index stands for. Index 0
// and lustre (5) are not exposed by Linux, nor are unknown indexes, so they
// report false and such entries are skipped.
func xattrBaseName(index uint8) (string, bool) {
	switch index {
	case XattrIndexUser:
		return xattrPrefixUser, true
	case XattrIndexPosixACLAccess:
		return xattrNamePosixACLAccess, true
	case XattrIndexPosixACLDefault:
		return xattrNamePosixACLDefault, true
	case XattrIndexTrusted:
		return xattrPrefixTrusted, true
	case XattrIndexSecurity:
		return xattrPrefixSecurity, true
	}
	return "", false
}

// InodeXattrs returns the extended attributes of an inode, sorted by name:
// the inline entries and the shared ones it refers to.
func (img *Image) InodeXattrs(ino *Inode) ([]Xattr, error) {
	if ino.XattrSize == 0 {
		return nil, nil
	}
	if ino.XattrSize == xattrIbodyHeaderSize {
		// The kernel refuses this size (EOPNOTSUPP) too.
		return nil, fmt.Errorf("erofs: nid %d: xattr area of only a header", ino.Nid)
	}
	start := ino.iloc + int64(ino.isize)
	if start > img.size-int64(ino.XattrSize) {
		return nil, fmt.Errorf("erofs: nid %d: xattr area at %d beyond the image end", ino.Nid, start)
	}
	area := make([]byte, ino.XattrSize)
	if err := img.readFull(area, start); err != nil {
		return nil, fmt.Errorf("erofs: nid %d: xattrs: %w", ino.Nid, err)
	}
	shared := int(area[4])
	p := xattrIbodyHeaderSize + 4*shared
	if p > len(area) {
		return nil, fmt.Errorf("erofs: nid %d: %d shared xattrs overflow an area of %d bytes", ino.Nid, shared, len(area))
	}
	var out []Xattr
	add := func(index uint8, suffix, value []byte) error {
		name, ok, err := img.xattrName(index, suffix)
		if err != nil || !ok {
			return err
		}
		out = append(out, Xattr{Name: name, Value: bytes.Clone(value)})
		return nil
	}
	// Inline entries first, then shared ones: the kernel's order, which
	// matters only to which of two duplicates sorts first.
	for q := p; q < len(area); {
		nl, idx, vs := int(area[q]), area[q+1], int(le.Uint16(area[q+2:]))
		end := q + xattrEntryHeaderSize + nl + vs
		if end > len(area) {
			return nil, fmt.Errorf("erofs: nid %d: inline xattr at %d overruns the area", ino.Nid, start+int64(q))
		}
		body := area[q+xattrEntryHeaderSize : end]
		if err := add(idx, body[:nl], body[nl:]); err != nil {
			return nil, fmt.Errorf("erofs: nid %d: inline xattr at %d: %w", ino.Nid, start+int64(q), err)
		}
		q = (end + 3) &^ 3
	}
	base := int64(img.sb.XattrBlkAddr) << img.bits
	for i := range shared {
		id := le.Uint32(area[xattrIbodyHeaderSize+4*i:])
		off := base + int64(id)*4
		idx, suffix, value, err := img.readSharedXattr(off)
		if err == nil {
			err = add(idx, suffix, value)
		}
		if err != nil {
			return nil, fmt.Errorf("erofs: nid %d: shared xattr %d at %d: %w", ino.Nid, id, off, err)
		}
	}
	slices.SortStableFunc(out, func(a, b Xattr) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// readSharedXattr reads the entry at byte offset off of the shared area.
func (img *Image) readSharedXattr(off int64) (index uint8, suffix, value []byte, err error) {
	var h [xattrEntryHeaderSize]byte
	if err := img.readFull(h[:], off); err != nil {
		return 0, nil, nil, err
	}
	nl, vs := int(h[0]), int(le.Uint16(h[2:]))
	body := make([]byte, nl+vs)
	if err := img.readFull(body, off+xattrEntryHeaderSize); err != nil {
		return 0, nil, nil, err
	}
	return h[1], body[:nl], body[nl:], nil
}

// xattrName builds an entry's full name; ok is false for entries Linux
// does not show.
func (img *Image) xattrName(index uint8, suffix []byte) (string, bool, error) {
	if index&xattrIndexLongPrefixFlag == 0 {
		base, ok := xattrBaseName(index)
		if !ok {
			return "", false, nil
		}
		return base + string(suffix), true, nil
	}
	pfx, err := img.longPrefixes()
	if err != nil {
		return "", false, err
	}
	n := int(index &^ xattrIndexLongPrefixFlag)
	if n >= len(pfx) {
		return "", false, fmt.Errorf("long prefix %d of %d", n, len(pfx))
	}
	if !pfx[n].ok {
		return "", false, nil
	}
	return pfx[n].prefix + string(suffix), true, nil
}

// longPrefixes returns the long xattr name prefix table, read on first use.
func (img *Image) longPrefixes() ([]longPrefix, error) {
	img.prefixOnce.Do(func() { img.prefixes, img.prefixErr = img.readLongPrefixes() })
	return img.prefixes, img.prefixErr
}

// readLongPrefixes reads the table from where the kernel looks for it: the
// packed inode's data when the image has one (unless the table is flagged
// plain), else the primary device.
func (img *Image) readLongPrefixes() ([]longPrefix, error) {
	sb := &img.sb
	if sb.FeatureIncompat&FeatureIncompatXattrPrefixes == 0 || sb.XattrPrefixCount == 0 {
		return nil, nil
	}
	var r io.ReaderAt = img.r
	limit := img.size
	where := "primary device"
	if sb.FeatureCompat&featureCompatPlainXattrPfx == 0 &&
		sb.FeatureIncompat&FeatureIncompatFragments != 0 && sb.PackedNid != 0 {
		packed, err := img.loadInode(sb.PackedNid)
		if err != nil {
			return nil, fmt.Errorf("long xattr prefixes: packed inode: %w", err)
		}
		if r, err = img.dataReader(packed); err != nil {
			return nil, fmt.Errorf("long xattr prefixes in the packed inode: %w", err)
		}
		limit, where = packed.Size, "packed inode"
	}
	read := func(p []byte, off int64) error {
		if off > limit || int64(len(p)) > limit-off {
			return fmt.Errorf("long xattr prefix at %d beyond the end of the %s", off, where)
		}
		return readFullAt(r, p, off)
	}
	out := make([]longPrefix, 0, sb.XattrPrefixCount)
	pos := int64(sb.XattrPrefixStart) * 4
	for i := range int(sb.XattrPrefixCount) {
		var h [2]byte
		if err := read(h[:], pos); err != nil {
			return nil, err
		}
		// The base index and the infix; the kernel refuses a record
		// with no base index or an infix longer than a name may be.
		n := int(le.Uint16(h[:]))
		if n < 1 || n > 1+MaxNameLen {
			return nil, fmt.Errorf("long xattr prefix %d: record of %d bytes (1 to %d)", i, n, 1+MaxNameLen)
		}
		b := make([]byte, n)
		if err := read(b, pos+2); err != nil {
			return nil, err
		}
		base, ok := xattrBaseName(b[0])
		if b[0]&xattrIndexLongPrefixFlag != 0 {
			return nil, fmt.Errorf("long xattr prefix %d: base index %#x is itself long", i, b[0])
		}
		out = append(out, longPrefix{prefix: base + string(b[1:]), ok: ok})
		pos = (pos + 2 + int64(n) + 3) &^ 3
	}
	return out, nil
}
