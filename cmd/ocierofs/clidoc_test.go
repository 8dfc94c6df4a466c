package main

import (
	"testing"

	"github.com/ocierofs/ocierofs/cmd/internal/clidoc"
)

// TestCLIDoc: docs/cli.md is what the command definitions say. After a
// change to a command or flag, `make docs` (UPDATE_DOCS=1) rewrites it.
func TestCLIDoc(t *testing.T) {
	intro := "Every command takes its flags before or after its arguments (`--` ends them), " +
		"short flags together (`ls -lR`), and `ocierofs help COMMAND` or `ocierofs COMMAND --help`.\n" +
		"`serve` and `sync` run the `ocierofs-mirror` program: their options are in [cli-mirror.md](cli-mirror.md)."
	md := clidoc.Markdown(newApp(), "ocierofs command reference", intro)
	if err := clidoc.Check("../../docs/cli.md", md); err != nil {
		t.Error(err)
	}
}
