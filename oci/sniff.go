package oci

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
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

// Decompressor returns r decompressed as kind, a compressed format Sniff
// names: gzip or zstd; xz and bzip2 are refused by name.
func Decompressor(kind string, r io.Reader) (io.ReadCloser, error) {
	switch kind {
	case "gzip":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return zr, nil
	case "zstd":
		// A window of up to 128 MiB (zstd --long=27), as zstd itself
		// decodes by default; the decoder's memory at most 4 GiB.
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(1<<27), zstd.WithDecoderMaxMemory(1<<32))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return zstdCloser{zr}, nil
	}
	return nil, fmt.Errorf("%s-compressed input is not supported (gzip, zstd or plain tar)", kind)
}

type zstdCloser struct{ *zstd.Decoder }

func (z zstdCloser) Close() error { z.Decoder.Close(); return nil }
