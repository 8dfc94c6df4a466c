package oci

import (
	"bytes"
	"io"
	"os"
	"syscall"
)

// Sniff names the format of a file or stream that starts with head, from
// its magic bytes, never from a name or media type (which lie): "gzip",
// "zstd", "xz", "bzip2", "tar" (a ustar header: it takes a head of 512
// bytes), or "" for none of them.
func Sniff(head []byte) string {
	for _, m := range []struct {
		magic  []byte
		format string
	}{
		{[]byte{0x1f, 0x8b}, "gzip"},
		{[]byte{0x28, 0xb5, 0x2f, 0xfd}, "zstd"},
		{[]byte{0xfd, '7', 'z', 'X', 'Z', 0}, "xz"},
		{[]byte("BZh"), "bzip2"},
	} {
		if bytes.HasPrefix(head, m.magic) {
			return m.format
		}
	}
	if len(head) >= 512 && bytes.HasPrefix(head[257:], []byte("ustar")) {
		return "tar"
	}
	return ""
}

// SniffFile is Sniff of the first bytes of the file at path, "" if it
// cannot be read. It never blocks on a FIFO.
func SniffFile(path string) string {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	return Sniff(head[:n])
}
