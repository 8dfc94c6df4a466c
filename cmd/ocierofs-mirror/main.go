// Command ocierofs-mirror keeps a registry's images converted to EROFS:
// serve converts every image pushed (registry notifications in, a NATS
// JetStream work queue, EROFS twins out), sync converts what has no
// up-to-date twin yet. `ocierofs serve` and `ocierofs sync` run it.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/version"
)

func main() {
	app := &cli.App{
		Name:            "ocierofs-mirror",
		Usage:           "keep a registry's images converted to EROFS",
		Version:         version.String(),
		HideHelpCommand: true,
		Commands:        []*cli.Command{serveCommand, syncCommand, version.Command},
		CommandNotFound: func(c *cli.Context, cmd string) {
			// urfave/cli would exit 3; a bad argument is 1 here.
			fmt.Fprintf(os.Stderr, "%s: no command %q (%s --help lists them)\n", c.App.Name, cmd, c.App.Name)
			os.Exit(1)
		},
		ExitErrHandler: func(*cli.Context, error) {},
	}
	if err := app.Run(os.Args); err != nil {
		var ee cli.ExitCoder
		code := 1
		if errors.As(err, &ee) && ee.ExitCode() != 0 {
			code = ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "ocierofs-mirror: %v\n", err)
		os.Exit(code)
	}
}
