// Package fuzzcorpus reads the files of a Go fuzz corpus (testdata/fuzz/
// FuzzX/NAME, "go test fuzz v1" then one value a line), so that plain tests
// can replay a crasher the fuzzer found at more places than its target
// reaches. Only []byte and string values are read.
package fuzzcorpus

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Values returns the values of the corpus file at path, in order.
func Values(path string) ([][]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if lines[0] != "go test fuzz v1" {
		return nil, fmt.Errorf("%s: not a fuzz corpus file (first line %q)", path, lines[0])
	}
	var out [][]byte
	for i, l := range lines[1:] {
		lit, ok := strings.CutPrefix(l, "[]byte(")
		if !ok {
			lit, ok = strings.CutPrefix(l, "string(")
		}
		lit, ok2 := strings.CutSuffix(lit, ")")
		if !ok || !ok2 {
			return nil, fmt.Errorf("%s:%d: not a []byte or string value", path, i+2)
		}
		s, err := strconv.Unquote(lit)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+2, err)
		}
		out = append(out, []byte(s))
	}
	return out, nil
}
