package zstd

import (
	"testing"
)

// FuzzZstd: every frame the encoder writes fits its budget and decodes to
// the consumed prefix; the decoder survives the fuzzer's bytes as a frame.
func FuzzZstd(f *testing.F) {
	f.Add(text()[:3000], uint16(1000), uint8(1))
	f.Add(repetitive(5000), uint16(64), uint8(3))
	f.Add(randomData(3000, 3), uint16(4096), uint8(9))
	f.Add([]byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x48, 0x01, 0x00, 0x00}, uint16(20), uint8(2))
	encs := map[uint8]*Encoder{}
	f.Fuzz(func(t *testing.T, data []byte, budget uint16, level uint8) {
		lv := MinLevel + int(level)%MaxLevel
		e := encs[uint8(lv)]
		if e == nil {
			var err error
			if e, err = NewEncoder(lv, WithWindow(1<<10<<(level%11))); err != nil {
				t.Fatal(err)
			}
			encs[uint8(lv)] = e
		}
		roundTrip(t, e, data, int(budget)%70000+1)
		// Garbage: must fail or decode, never panic.
		for _, n := range []int{0, 1, len(data), 4 * len(data)} {
			_ = Decompress(make([]byte, n), data)
		}
	})
}
