package convert

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// failingEnd reads r, then fails with err instead of io.EOF: a registry
// blob whose digest does not match, as go-containerregistry reports it.
type failingEnd struct {
	r   io.Reader
	err error
}

func (f *failingEnd) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		err = f.err
	}
	return n, err
}

// TestDecompressSourceError: an error of the compressed stream itself is
// passed on as it is, not blamed on the codec; the codec's own errors and a
// stream cut short are still named after it.
func TestDecompressSourceError(t *testing.T) {
	payload := bytes.Repeat([]byte("layer data "), 10000)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(payload)
	zw.Close()
	enc, _ := zstd.NewWriter(nil)
	zs := enc.EncodeAll(payload, nil)
	digestErr := errors.New(`error verifying sha256 checksum after reading 321 bytes; got "sha256:50b9", want "sha256:2205"`)
	for _, tc := range []struct {
		name string
		blob []byte
	}{{"gzip", gz.Bytes()}, {"zstd", zs}} {
		t.Run(tc.name, func(t *testing.T) {
			// A blob that fails its digest at the end.
			rc, _, err := Decompress(&failingEnd{r: bytes.NewReader(tc.blob), err: digestErr})
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(io.Discard, rc)
			if !errors.Is(err, digestErr) || strings.HasPrefix(err.Error(), tc.name+":") {
				t.Errorf("digest mismatch: err = %v, want the source's error, not one of %s", err, tc.name)
			}
			// Cut short: the codec says the stream ends early.
			rc, _, err = Decompress(bytes.NewReader(tc.blob[:len(tc.blob)/2]))
			if err != nil {
				t.Fatal(err)
			}
			_, err = io.Copy(io.Discard, rc)
			if err == nil || !strings.HasPrefix(err.Error(), tc.name+": ") {
				t.Errorf("cut stream: err = %v, want a %s error", err, tc.name)
			}
		})
	}
}
