// Command ocierofs converts container image layers into EROFS images and
// looks inside them.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

func main() {
	app := &cli.App{
		Name:  "ocierofs",
		Usage: "convert container images and tar layers into EROFS",
		Description: "ocierofs builds EROFS images from OCI/Docker tar layers, exactly as the Linux\n" +
			"kernel mounts them, and reads them back for inspection and verification.",
		HideHelpCommand: true,
		Commands: []*cli.Command{
			convertCommand,
			cacheCommand,
			serveCommand,
			syncCommand,
			mkfsCommand,
			inspectCommand,
			lsCommand,
			catCommand,
			extractCommand,
			verifyCommand,
		},
		ExitErrHandler: func(*cli.Context, error) {},
	}
	if err := app.Run(os.Args); err != nil {
		var ee cli.ExitCoder
		code := 1
		if errors.As(err, &ee) && ee.ExitCode() != 0 {
			code = ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "ocierofs: %v\n", err)
		os.Exit(code)
	}
}
