// Command ocierofs-mirror keeps a registry's images converted to EROFS:
// serve converts every image pushed (registry notifications in, a NATS
// JetStream work queue, EROFS twins out), sync converts what has no
// up-to-date twin yet. `ocierofs serve` and `ocierofs sync` run it.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/cmd/internal/version"
)

func main() {
	app := newApp()
	if filepath.Base(os.Args[0]) == "ocierofs" {
		// Run by `ocierofs serve|sync`: help and errors name that.
		app.Name = "ocierofs"
	}
	args, err := options.Args(app, os.Args)
	if err == nil {
		err = app.Run(args)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", app.Name, err)
		os.Exit(options.ExitCode(err))
	}
}

// newApp returns the command line of ocierofs-mirror, set up as
// options.Setup makes both programs take it. The reference
// docs/cli-mirror.md is generated from it (TestCLIDoc).
func newApp() *cli.App {
	app := &cli.App{
		Name:            "ocierofs-mirror",
		Usage:           "keep a registry's images converted to EROFS",
		Version:         version.String(),
		HideHelpCommand: true,
		Commands:        []*cli.Command{serveCommand, syncCommand, version.Command},
		CommandNotFound: options.CommandNotFound,
		ExitErrHandler:  func(*cli.Context, error) {},
	}
	options.Setup(app)
	return app
}
