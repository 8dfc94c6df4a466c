package convert_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ocierofs/ocierofs/convert"
)

// TestMaxTarSizeHeader: a file whose header alone puts the tar past
// MaxTarSize fails at that header, naming it, rather than after its data
// is decompressed up to the bound (or, for a blob cut short after the
// header, as a truncated tar: the layer TestServeDefaultMaxLayerSize
// pushes).
func TestMaxTarSizeHeader(t *testing.T) {
	var blob bytes.Buffer
	zw := gzip.NewWriter(&blob)
	tw := tar.NewWriter(zw)
	if err := tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: 64 << 30}); err != nil {
		t.Fatal(err)
	}
	tw.Write(make([]byte, 1<<20)) // and no more: the rest would be 64 GiB
	tw.Flush()
	zw.Close()
	f, err := os.Create(filepath.Join(t.TempDir(), "out.erofs"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, err = convert.BuildTar(f, &blob, convert.Options{MaxTarSize: 1 << 30})
	if !errors.As(err, new(*convert.TooLargeError)) || !strings.Contains(err.Error(), `tar entry "big"`) {
		t.Errorf("a 64 GiB file under a 1 GiB bound: %v, want a TooLargeError naming the entry", err)
	}
}
