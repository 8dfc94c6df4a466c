package deflate

import (
	"bytes"
	stdflate "compress/flate"
	"io"
	"testing"
)

// FuzzDeflate: for any input, budget and level, the stream fits the
// budget, never starts with a zero byte, and inflates (with this package
// and with compress/flate) to exactly the consumed prefix.
func FuzzDeflate(f *testing.F) {
	f.Add([]byte("hello, hello, hello world"), uint16(16), uint8(6))
	f.Add(bytes.Repeat([]byte("abcabcabd"), 500), uint16(100), uint8(1))
	f.Add(randomBytes(5000, 1), uint16(4096), uint8(9))
	f.Add(goSource(20000), uint16(4096), uint8(6))
	f.Add(goSource(70000)[50000:], uint16(700), uint8(4))
	f.Add(make([]byte, 20000), uint16(9), uint8(3))
	e := map[uint8]*Encoder{}
	f.Fuzz(func(t *testing.T, src []byte, budget uint16, level uint8) {
		level = LevelMin + level%LevelMax
		lv := int(level)
		if e[level] == nil {
			e[level], _ = NewEncoder(lv, WithBlockTokens(256+int(budget)%2000))
		}
		dst := make([]byte, budget)
		w, c := e[level].CompressDestSize(dst, src)
		check(t, dst, src, w, c)
		if e[level].fallbacks != 0 {
			t.Fatalf("the bit accounting overran the budget")
		}
		if len(src) > 0 && budget >= 8 && c == 0 {
			t.Fatalf("nothing fits in %d bytes", budget)
		}
	})
}

// FuzzDecompress: garbage never panics, and whatever Decompress accepts,
// compress/flate reads the same way.
func FuzzDecompress(f *testing.F) {
	f.Add([]byte{0x08, 0, 0, 0xff, 0xff, 3, 0, 2}, uint16(0))
	f.Add([]byte{0x01, 3, 0, 0xfc, 0xff, 'a', 'b', 'c'}, uint16(3))
	f.Add([]byte{0x4b, 0x4c, 0x4a, 0x06, 0x00}, uint16(3))
	e, _ := NewEncoder(6)
	src := goSource(30000)
	dst := make([]byte, 2000)
	w, c := e.CompressDestSize(dst, src)
	f.Add(dst[:w], uint16(c))
	f.Fuzz(func(t *testing.T, stream []byte, size uint16) {
		out := make([]byte, size)
		if Decompress(out, stream) != nil {
			return
		}
		std, err := io.ReadAll(stdflate.NewReader(bytes.NewReader(stream)))
		if err != nil || !bytes.Equal(std, out) {
			t.Fatalf("accepted %d bytes, compress/flate reads %d (%v)", size, len(std), err)
		}
	})
}
