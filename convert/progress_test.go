package convert_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ocierofs/ocierofs/convert"
	"github.com/ocierofs/ocierofs/convert/internal/convtest"
)

// TestProgressStages: an upload reports the bytes its Publish says it
// sent, and a layer given up when the caller's context ends is
// interrupted, not failed.
func TestProgressStages(t *testing.T) {
	img := convtest.Image(t, "amd64", convtest.TestImageLayers(t)...)
	desc := convtest.SourceDescriptor(t, img)
	var mu sync.Mutex
	var seen []convert.Progress
	hook := func(p convert.Progress) {
		mu.Lock()
		seen = append(seen, p)
		mu.Unlock()
	}
	has := func(stage convert.Stage, read, total int64) bool {
		mu.Lock()
		defer mu.Unlock()
		for _, p := range seen {
			if p.Stage == stage && (read < 0 || p.Read == read) && (total < 0 || p.Total == total) {
				return true
			}
		}
		return false
	}

	c, err := convert.NewConverter(convert.ImageOptions{TempDir: t.TempDir(), Jobs: 1, Progress: hook,
		Publish: func(ctx context.Context, l v1.Layer) error {
			convert.ReportUpload(ctx, 5, 10)
			return nil
		}})
	must(t, err)
	if _, _, err := c.Image(context.Background(), img, desc); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !has(convert.StageUploading, 5, 10) {
		t.Errorf("no upload progress of 5 of 10 bytes in %+v", seen)
	}

	seen = nil
	ctx, cancel := context.WithCancel(context.Background())
	c, err = convert.NewConverter(convert.ImageOptions{TempDir: t.TempDir(), Jobs: 1, Progress: hook,
		Publish: func(context.Context, v1.Layer) error {
			cancel() // Ctrl-C during the first upload
			return context.Canceled
		}})
	must(t, err)
	defer c.Close()
	if _, _, err := c.Image(ctx, img, desc); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if !has(convert.StageInterrupted, -1, -1) || has(convert.StageFailed, -1, -1) {
		t.Errorf("stages after an interrupt: %+v; want interrupted, not failed", seen)
	}
}
