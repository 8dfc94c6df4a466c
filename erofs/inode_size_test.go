package erofs

import (
	"testing"
	"unsafe"
)

// TestInodeSize guards the memory of a layer's metadata: the Builder keeps
// one inode per entry until Finish, and 112 bytes is a size class of Go's
// allocator (the next is 128). A field added must take the place of
// another, go into inodeRare if few entries need it, or go beside the
// inodes as tailSharers and the directories' dirents do.
func TestInodeSize(t *testing.T) {
	if n := unsafe.Sizeof(inode{}); n > 112 {
		t.Errorf("inode is %d bytes, more than 112", n)
	}
}

// TestZfileSize: a compressed file also keeps its zfile until Finish; 64
// bytes is a size class (the next is 80).
func TestZfileSize(t *testing.T) {
	if n := unsafe.Sizeof(zfile{}); n > 64 {
		t.Errorf("zfile is %d bytes, more than 64", n)
	}
}
