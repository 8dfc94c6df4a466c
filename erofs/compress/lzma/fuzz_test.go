package lzma

import (
	"bytes"
	"testing"
)

// FuzzLZMA: for any input, level and budget, the stream fits the budget,
// starts with 0xA2 and decodes to exactly the consumed prefix; and the
// decoder, given the input itself as a stream, returns without panicking.
func FuzzLZMA(f *testing.F) {
	f.Add(uint8(1), uint16(4096), []byte("hello, hello, hello world"))
	f.Add(uint8(6), uint16(64), bytes.Repeat([]byte("abcab"), 300))
	f.Add(uint8(0), uint16(6), []byte{0})
	f.Add(uint8(9), uint16(200), randomData(3000, 1))
	f.Add(uint8(3), uint16(5000), text()[:20000])
	f.Add(uint8(1), uint16(100), []byte{0xA2, 0, 0, 0, 0, 0, 1, 2, 3})
	var encs [LevelMax + 1]*Encoder
	d, _ := NewDecoder(64 << 10)
	f.Fuzz(func(t *testing.T, level uint8, budget uint16, data []byte) {
		lv := int(level) % (LevelMax + 1)
		if encs[lv] == nil {
			encs[lv], _ = NewEncoder(lv, WithDictSize(64<<10))
		}
		e := encs[lv]
		dst := make([]byte, int(budget)+8)
		w, c := e.CompressDestSize(dst[:budget], data)
		if w > int(budget) || c > len(data) {
			t.Fatalf("wrote %d of %d, consumed %d of %d", w, budget, c, len(data))
		}
		if c > 0 {
			if dst[0] != 0xA2 {
				t.Fatalf("first byte %#x", dst[0])
			}
			out := make([]byte, c)
			if err := d.Decode(out, dst[:w]); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !bytes.Equal(out, data[:c]) {
				t.Fatal("decoded bytes differ")
			}
		} else if len(data) > 0 && budget >= 64 {
			t.Fatalf("nothing consumed with a budget of %d", budget)
		}
		// Garbage: the input as a stream, for a few output sizes.
		for _, n := range []int{0, 1, len(data), 3 * len(data)} {
			d.Decode(make([]byte, n), data)
		}
	})
}
