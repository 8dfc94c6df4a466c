package erofs

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unsafe"
)

// TestInodeSize guards the memory of a layer's metadata: the Builder keeps
// one inode per entry until Finish, and 96 bytes is a size class of Go's
// allocator (the next is 112). A field added must take the place of
// another, go into inodeRare if few entries need it, or go beside the
// inodes as tailSharers and the directories' dirents do.
func TestInodeSize(t *testing.T) {
	if n := unsafe.Sizeof(inode{}); n > 96 {
		t.Errorf("inode is %d bytes, more than 96", n)
	}
}

// TestZfileSize: a compressed file also keeps its zfile until Finish; 64
// bytes is a size class (the next is 80).
func TestZfileSize(t *testing.T) {
	if n := unsafe.Sizeof(zfile{}); n > 64 {
		t.Errorf("zfile is %d bytes, more than 64", n)
	}
}

// TestXattrAreaLimit: an inode's xattr area is sized by i_xattr_icount, a
// 16-bit count of 4-byte units. Xattrs past it are one clear error at
// Finish, not a count that wraps into a wrong image.
func TestXattrAreaLimit(t *testing.T) {
	build := func(n int) error {
		var img memWriterAt
		b, err := NewBuilder(&img, Options{TempDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		e := Entry{Path: "f", Mode: S_IFREG | 0o644}
		for i := range n {
			e.Xattrs = append(e.Xattrs, Xattr{Name: fmt.Sprintf("user.x%d", i), Value: bytes.Repeat([]byte{'v'}, 60000)})
		}
		if err := b.Add(e, nil); err != nil {
			return err
		}
		return b.Finish()
	}
	if err := build(4); err != nil { // 240 KB: fits
		t.Fatalf("4 xattrs of 60000 bytes: %v", err)
	}
	err := build(5) // 300 KB: does not
	if err == nil || !strings.Contains(err.Error(), "xattrs take") {
		t.Fatalf("5 xattrs of 60000 bytes: got %v, want the xattr limit", err)
	}
}
