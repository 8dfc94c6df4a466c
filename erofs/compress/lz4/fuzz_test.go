package lz4

import (
	"bytes"
	"testing"
)

// FuzzLZ4 checks the encoder against any input, budget and level:
// the block stays within the budget, obeys the end-of-block rules, and
// decodes (with this package's decoder and pierrec's) to exactly the
// consumed prefix. It also feeds the raw input to the decoders, which must
// return an error or a result, never panic or write past dst.
func FuzzLZ4(f *testing.F) {
	f.Add([]byte("hello hello hello hello hello hello"), uint16(16), uint8(0))
	f.Add(bytes.Repeat([]byte{0}, 5000), uint16(4096), uint8(9))
	f.Add(bytes.Repeat([]byte("abcabd"), 3000), uint16(300), uint8(12))
	f.Add([]byte{0xf0, 0xff, 0xff, 0x01, 0x00, 0x00}, uint16(7), uint8(3))
	f.Add(text()[:20000], uint16(2048), uint8(10))
	encoders := map[int]*Encoder{}
	f.Fuzz(func(t *testing.T, src []byte, budget uint16, level uint8) {
		lv := int(level) % (LevelMax + 1)
		e := encoders[lv]
		if e == nil {
			e, _ = NewEncoder(lv)
			encoders[lv] = e
		}
		roundTrip(t, e, src, int(budget)%(1<<14)+1)

		// Garbage into the decoders.
		out := make([]byte, len(src)*4+16)
		guard := out[len(out)-16:]
		for i := range guard {
			guard[i] = 0x5A
		}
		dst := out[:len(out)-16]
		if n, err := Decompress(dst, src); err == nil && n > len(dst) {
			t.Fatalf("Decompress reports %d bytes into %d", n, len(dst))
		}
		if n, err := DecompressPartial(dst[:len(dst)/2], src); err == nil && n > len(dst)/2 {
			t.Fatalf("DecompressPartial reports %d bytes into %d", n, len(dst)/2)
		}
		for _, b := range guard {
			if b != 0x5A {
				t.Fatal("decoder wrote past dst")
			}
		}
	})
}
