package main

import (
	"debug/elf"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReleaseBuild builds both programs with the Makefile, as a release
// is built, and checks that they are what it promises: static (no
// interpreter: nothing but the program is mapped at start-up) and without
// urfave/cli's documentation writers, which would bring the Markdown
// renderer and its initialisation into every image build.
func TestReleaseBuild(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	dir := t.TempDir()
	bin, mirror := filepath.Join(dir, "ocierofs"), filepath.Join(dir, "ocierofs-mirror")
	cmd := exec.Command("make", "-s", "-C", "../..", "build", "BIN="+bin, "MIRROR="+mirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	for _, p := range []string{bin, mirror} {
		f, err := elf.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, ph := range f.Progs {
			if ph.Type == elf.PT_INTERP {
				t.Errorf("%s is dynamically linked", filepath.Base(p))
			}
		}
		syms, err := f.Symbols()
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		for _, s := range syms {
			if strings.HasPrefix(s.Name, "github.com/russross/blackfriday") {
				t.Errorf("%s links %s: built without urfave_cli_no_docs?", filepath.Base(p), s.Name)
				break
			}
		}
	}
	if out, err := exec.Command(bin, "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "mkfs") {
		t.Errorf("ocierofs --help: %v\n%s", err, out)
	}
	// --version names the checkout as git describe does.
	desc, err := exec.Command("git", "-C", "../..", "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		t.Logf("no git checkout to compare --version with: %v", err)
		return
	}
	for _, p := range []string{bin, mirror} {
		want := filepath.Base(p) + " version " + strings.TrimSpace(string(desc)) + " (go"
		if out, err := exec.Command(p, "--version").CombinedOutput(); err != nil || !strings.HasPrefix(string(out), want) {
			t.Errorf("%s --version: %v\n%s\nwant it to start with %q", filepath.Base(p), err, out, want)
		}
	}
}
