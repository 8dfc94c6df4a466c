package erofs

import (
	"errors"
	"sort"
	"strings"
)

// xattrPrefix splits a full xattr name into its EROFS name index and the
// suffix stored on disk. Only namespaces the kernel can show are accepted.
func xattrPrefix(name string) (index uint8, suffix string, err error) {
	switch {
	case name == xattrNamePosixACLAccess:
		return XattrIndexPosixACLAccess, "", nil
	case name == xattrNamePosixACLDefault:
		return XattrIndexPosixACLDefault, "", nil
	case strings.HasPrefix(name, xattrPrefixUser):
		index, suffix = XattrIndexUser, name[len(xattrPrefixUser):]
	case strings.HasPrefix(name, xattrPrefixTrusted):
		index, suffix = XattrIndexTrusted, name[len(xattrPrefixTrusted):]
	case strings.HasPrefix(name, xattrPrefixSecurity):
		index, suffix = XattrIndexSecurity, name[len(xattrPrefixSecurity):]
	default:
		return 0, "", errors.New("namespace not representable in EROFS (user., trusted., security., system.posix_acl_*)")
	}
	if suffix == "" {
		return 0, "", errors.New("empty name after the namespace")
	}
	if len(name) > maxXattrNameLen {
		// Linux's XATTR_NAME_MAX: a longer name is listed, but no
		// getxattr can read it (ERANGE).
		return 0, "", errors.New("name longer than 255 bytes")
	}
	return index, suffix, nil
}

// CheckXattrName reports whether an xattr name can be stored: EROFS names
// only the user., trusted. and security. namespaces and the POSIX ACLs.
func CheckXattrName(name string) error {
	_, _, err := xattrPrefix(name)
	return err
}

// setXattr inserts or replaces x in a name-sorted list.
func setXattr(list []Xattr, x Xattr) []Xattr {
	i := sort.Search(len(list), func(i int) bool { return list[i].Name >= x.Name })
	if i < len(list) && list[i].Name == x.Name {
		list[i] = x
		return list
	}
	list = append(list, Xattr{})
	copy(list[i+1:], list[i:])
	list[i] = x
	return list
}

// xattrEntrySize is the on-disk size of one entry, 4-byte aligned.
func xattrEntrySize(x *Xattr) int {
	_, suffix, _ := xattrPrefix(x.Name)
	return (xattrEntryHeaderSize + len(suffix) + len(x.Value) + 3) &^ 3
}

// xattrAreaMax is the inline area size if no xattr is shared.
func xattrAreaMax(list []Xattr) int {
	if len(list) == 0 {
		return 0
	}
	n := xattrIbodyHeaderSize
	for i := range list {
		n += xattrEntrySize(&list[i])
	}
	return n
}

// appendXattrEntry encodes one entry.
func appendXattrEntry(dst []byte, x *Xattr) []byte {
	index, suffix, _ := xattrPrefix(x.Name)
	start := len(dst)
	dst = append(dst, uint8(len(suffix)), index, 0, 0)
	le.PutUint16(dst[start+2:], uint16(len(x.Value)))
	dst = append(dst, suffix...)
	dst = append(dst, x.Value...)
	for (len(dst)-start)&3 != 0 {
		dst = append(dst, 0)
	}
	return dst
}

// xattrKey identifies a name=value pair for sharing.
func xattrKey(x *Xattr) string { return x.Name + "\x00" + string(x.Value) }

// sharedXattrs is the table of name=value pairs stored once and referenced
// by id from every inode that carries them.
type sharedXattrs struct {
	bs    int               // block size: no shared entry crosses a block
	count map[string]int    // inodes carrying each pair
	id    map[string]uint32 // id (offset/4 from xattr_blkaddr) of shared pairs
	table []byte
}

// minShare is how many inodes must carry a pair before it is shared: from
// two on, a 4-byte id per inode is never larger than the inline entry.
const minShare = 2

func (s *sharedXattrs) countInode(ino *inode) {
	for i := range ino.xattrs {
		s.count[xattrKey(&ino.xattrs[i])]++
	}
}

// assign appends the pairs of ino that are shared but not yet in the table,
// so the table is in first-use order of the inode layout. An entry never
// crosses a block of the table (readers such as go-erofs read a shared
// entry from one block); one larger than a block stays inline.
func (s *sharedXattrs) assign(ino *inode) {
	for i := range ino.xattrs {
		x := &ino.xattrs[i]
		k := xattrKey(x)
		if s.count[k] < minShare {
			continue
		}
		if _, ok := s.id[k]; ok {
			continue
		}
		size := xattrEntrySize(x)
		if size > s.bs {
			delete(s.count, k)
			continue
		}
		if off := len(s.table) % s.bs; off+size > s.bs {
			s.table = append(s.table, make([]byte, s.bs-off)...)
		}
		s.id[k] = uint32(len(s.table) / 4)
		s.table = appendXattrEntry(s.table, x)
	}
}

// area returns the size of ino's inline xattr area and its i_xattr_icount.
func (s *sharedXattrs) area(ino *inode) (size int, icount uint16) {
	if len(ino.xattrs) == 0 {
		return 0, 0
	}
	size = xattrIbodyHeaderSize
	nshared := 0
	for i := range ino.xattrs {
		x := &ino.xattrs[i]
		if _, ok := s.id[xattrKey(x)]; ok && nshared < maxSharedXattrsPerInode {
			nshared++
			size += 4
		} else {
			size += xattrEntrySize(x)
		}
	}
	return size, uint16((size-xattrIbodyHeaderSize)/4 + 1)
}

// appendArea encodes ino's inline xattr area: header, shared ids, entries.
func (s *sharedXattrs) appendArea(dst []byte, ino *inode) []byte {
	if len(ino.xattrs) == 0 {
		return dst
	}
	hdr := len(dst)
	dst = append(dst, make([]byte, xattrIbodyHeaderSize)...)
	var inline []int
	nshared := 0
	for i := range ino.xattrs {
		x := &ino.xattrs[i]
		if id, ok := s.id[xattrKey(x)]; ok && nshared < maxSharedXattrsPerInode {
			dst = le.AppendUint32(dst, id)
			nshared++
		} else {
			inline = append(inline, i)
		}
	}
	dst[hdr+4] = uint8(nshared)
	for _, i := range inline {
		dst = appendXattrEntry(dst, &ino.xattrs[i])
	}
	return dst
}
