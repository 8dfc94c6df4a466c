package merge_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ocierofs/ocierofs/convert/merge"
)

// TestTagsCount: Options.Tags gives one tag per layer or is refused.
func TestTagsCount(t *testing.T) {
	_, err := merge.Images(filepath.Join(t.TempDir(), "out.erofs"), []string{"a", "b"}, merge.Options{Tags: []string{"x"}})
	if err == nil || !strings.Contains(err.Error(), "1 device tags for 2 layers") {
		t.Fatalf("got %v", err)
	}
}
