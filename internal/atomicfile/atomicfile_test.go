package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f.json")
	for _, data := range []string{"first", "second, longer"} {
		if err := WriteFile(p, []byte(data)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != data {
			t.Errorf("read %q, %v; want %q", got, err, data)
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
			t.Errorf("mode %v", fi.Mode())
		}
	}
	// A fill that fails leaves nothing; the file stays as it was.
	_, err := WriteTemp(dir, "f.json", func(f *os.File) error { f.WriteString("half"); return errors.New("no") })
	if err == nil {
		t.Error("WriteTemp: the fill's error is lost")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".tmp-*")); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
	if err := WriteFile(filepath.Join(dir, "no", "such", "dir"), nil); err == nil {
		t.Error("WriteFile into a missing directory: no error")
	}
}
