// Package corpus makes the test inputs the codec packages share: the same
// bytes for the same arguments, so ratios measured in one package compare
// with another's.
package corpus

import (
	"bytes"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// GoSource returns size bytes of the Go sources in GOROOT concatenated in
// path order; without GOROOT sources, words drawn from a Go vocabulary.
func GoSource(size int) []byte {
	var buf bytes.Buffer
	var files []string
	filepath.WalkDir(filepath.Join(goroot(), "src"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") {
			files = append(files, p)
		}
		return nil
	})
	slices.Sort(files)
	for _, f := range files {
		if buf.Len() >= size {
			break
		}
		if b, err := os.ReadFile(f); err == nil {
			buf.Write(b)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("func return if else for range var const type struct interface map chan go defer select case default package import nil err := = { } ( ) , ; int string byte error len make append copy")
	for buf.Len() < size {
		buf.WriteString(words[r.IntN(len(words))])
		buf.WriteByte(" \n\t"[r.IntN(3)])
	}
	return buf.Bytes()[:size]
}

// Random returns size pseudo-random bytes drawn from seed.
func Random(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Repetitive is a 12-byte pattern repeated with a random byte in about one
// of 500: long matches, long repeat-offset runs and few literals.
func Repetitive(size int) []byte {
	r := rand.New(rand.NewPCG(3, 4))
	b := make([]byte, size)
	pat := []byte("abcdefgh0123")
	for i := range b {
		b[i] = pat[i%len(pat)]
		if r.IntN(500) == 0 {
			b[i] = byte(r.Uint32())
		}
	}
	return b
}

// goroot is the GOROOT of the go command on PATH (the sources of the
// toolchain that runs the tests), or "" without one.
func goroot() string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
