package fuzzcorpus

import (
	"os"
	"path/filepath"
	"testing"
)

func TestValues(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := Values(write("ok", "go test fuzz v1\n[]byte(\"a\\x00\\n\")\nstring(\"b\")\n[]byte(\"\")\n"))
	if err != nil || len(got) != 3 || string(got[0]) != "a\x00\n" || string(got[1]) != "b" || len(got[2]) != 0 {
		t.Errorf("Values = %q, %v", got, err)
	}
	for name, text := range map[string]string{
		"header": "go test fuzz v2\n[]byte(\"a\")\n",
		"type":   "go test fuzz v1\nint(3)\n",
		"quote":  "go test fuzz v1\n[]byte(\"a)\n",
	} {
		if got, err := Values(write(name, text)); err == nil {
			t.Errorf("%s: Values = %q, want an error", name, got)
		}
	}
}
