package cache

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/dmverity"
	"github.com/ocierofs/ocierofs/convert/mkfs"
)

// TestPlaceEntryRace: runs that place one entry at once, each with its own
// image and dm-verity tree (as two cache runs over different lower layers
// would), leave one whole entry with its own sidecar, and none of them
// fails (review 19-c L8: a sidecar could end up beside the other's entry).
func TestPlaceEntryRace(t *testing.T) {
	dir := t.TempDir()
	const runs = 4
	var srcs [runs]string
	var verity [runs]*dmverity.Metadata
	for i := range srcs {
		in := filepath.Join(dir, fmt.Sprintf("in%d", i))
		if err := os.MkdirAll(in, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(in, "f"), []byte(fmt.Sprintf("run %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		srcs[i] = filepath.Join(dir, fmt.Sprintf("img%d", i))
		if _, err := mkfs.Build(srcs[i], in, convert.Options{}); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(srcs[i])
		if err != nil {
			t.Fatal(err)
		}
		e, err := finishFile(srcs[i], st.Size(), true, false)
		if err != nil {
			t.Fatal(err)
		}
		verity[i] = e.verity
	}
	dst := filepath.Join(dir, "cache", "sha256", "ab", "entry.erofs")
	rounds := 200
	if testing.Short() {
		rounds = 30 // each round checks the whole entry and its tree
	}
	for round := range rounds {
		os.Remove(dst)
		os.Remove(dmverity.SidecarPath(dst))
		var wg sync.WaitGroup
		errs := make([]error, runs)
		for i := range srcs {
			wg.Go(func() {
				_, errs[i] = placeEntry(srcs[i], dst, nil, verity[i], false, true)
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, run %d: %v", round, i, err)
			}
		}
		if _, _, err := checkEntry(dst, true); err != nil {
			t.Fatalf("round %d: the entry placed is not whole: %v", round, err)
		}
	}
}
