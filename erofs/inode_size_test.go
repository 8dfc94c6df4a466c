package erofs

import (
	"testing"
	"unsafe"
)

// TestInodeSize guards the memory of a layer's metadata: the Builder keeps
// one inode per entry until Finish, and 128 bytes is a size class of Go's
// allocator (the next is 144). A field added must take the place of
// another, go into inodeRare if few entries need it, or go beside the
// inodes as tailSharers and the directories' dirents do.
func TestInodeSize(t *testing.T) {
	if n := unsafe.Sizeof(inode{}); n > 128 {
		t.Errorf("inode is %d bytes, more than 128", n)
	}
}
