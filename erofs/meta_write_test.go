package erofs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestMetaRunsSameImage: Finish encodes and writes the meta area in runs
// on several workers. With 3,000 files whose data is inline next to their
// inodes the area spans dozens of runs; the image must not depend on the
// number of workers, and the kernel must read every file back.
func TestMetaRunsSameImage(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	files := map[string][]byte{}
	words := []string{"erofs ", "inode ", "pcluster ", "nid ", "whiteout ", "diffID "}
	for i := range 3000 {
		var b bytes.Buffer
		for n := rng.IntN(3000); b.Len() < n; {
			b.WriteString(words[rng.IntN(len(words))])
		}
		if i%5 == 0 {
			b.Write(make([]byte, 4096+rng.IntN(8192))) // a block or more, then a tail
		}
		files[fmt.Sprintf("d%02d/f%04d", i%37, i)] = b.Bytes()
	}
	// Files under 3,000 bytes go inline whole, for both layouts below.
	inline := 0
	for _, data := range files {
		if len(data) < 3000 {
			inline += len(data)
		}
	}
	if inline < 8*metaRunBytes {
		t.Fatalf("%d bytes inline: fewer than 8 runs", inline)
	}
	for _, c := range []*Compression{nil, {Algorithm: AlgLZ4, PclusterSize: 4096}} {
		name := "none"
		if c != nil {
			name = "lz4"
		}
		t.Run(name, func(t *testing.T) {
			one := buildFiles(t, Options{Workers: 1, Compression: c}, files)
			for _, n := range []int{2, 5} {
				if got := buildFiles(t, Options{Workers: n, Compression: c}, files); !bytes.Equal(got, one) {
					t.Errorf("%d workers: image of %d bytes differs from one worker's (%d bytes) at %d", n, len(got), len(one), firstDiff(got, one))
				}
			}
			if why := noMount(); why != "" {
				t.Skip(why)
			}
			mountCompare(t, one, files)
		})
	}
}
