// Command ocierofs-mirror keeps a registry's images converted to EROFS:
// serve converts every image pushed (registry notifications in, a NATS
// JetStream work queue, EROFS twins out), sync converts what has no
// up-to-date twin yet. `ocierofs serve` and `ocierofs sync` run it.
package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/cmd/internal/version"
)

func main() {
	app := &cli.App{
		Name:            "ocierofs-mirror",
		Usage:           "keep a registry's images converted to EROFS",
		Version:         version.String(),
		HideHelpCommand: true,
		Commands:        []*cli.Command{serveCommand, syncCommand, version.Command},
		CommandNotFound: options.CommandNotFound,
		ExitErrHandler:  func(*cli.Context, error) {},
	}
	if err := app.Run(os.Args); err != nil {
		fmt.Fprintf(os.Stderr, "ocierofs-mirror: %v\n", err)
		os.Exit(options.ExitCode(err))
	}
}
