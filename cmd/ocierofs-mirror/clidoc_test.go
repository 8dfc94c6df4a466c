package main

import (
	"testing"

	"github.com/ocierofs/ocierofs/cmd/internal/clidoc"
	"github.com/urfave/cli/v2"
)

// TestCLIDoc: docs/cli-mirror.md is what the definitions of serve and sync
// say. After a change to one of their flags, `make docs` (UPDATE_DOCS=1)
// rewrites it.
func TestCLIDoc(t *testing.T) {
	// --nats-store's default depends on who runs serve (root, another
	// user, XDG_STATE_HOME): the reference gives root's, a system
	// service's, whoever runs the test or make docs.
	for _, f := range serveCommand.Flags {
		if sf, ok := f.(*cli.StringFlag); ok && sf.Name == "nats-store" {
			defer func(d string) { sf.DefaultText = d }(sf.DefaultText)
			sf.DefaultText = "/var/lib/ocierofs/nats"
		}
	}
	app := newApp()
	app.Name = "ocierofs" // as users type it: ocierofs serve, ocierofs sync
	intro := "`ocierofs serve` and `ocierofs sync` run the `ocierofs-mirror` program with the same arguments " +
		"(`ocierofs-mirror serve` is the same command). How the mirror works: [mirror.md](mirror.md); " +
		"the other commands: [cli.md](cli.md)."
	md := clidoc.Markdown(app, "ocierofs serve and sync: command reference", intro)
	if err := clidoc.Check("../../docs/cli-mirror.md", md); err != nil {
		t.Error(err)
	}
}
