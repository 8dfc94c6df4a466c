package options

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

// CommandNotFound is both programs' answer to an unknown command: one line
// naming it, and exit status 1 (urfave/cli's own would be 3).
func CommandNotFound(c *cli.Context, cmd string) {
	fmt.Fprintf(os.Stderr, "%s: no command %q (%s --help lists them)\n", c.App.Name, cmd, c.App.Name)
	os.Exit(1)
}

// ExitCode is the exit status for an error app.Run returned: the one a
// cli.ExitCoder carries, else 1.
func ExitCode(err error) int {
	var ee cli.ExitCoder
	if errors.As(err, &ee) && ee.ExitCode() != 0 {
		return ee.ExitCode()
	}
	return 1
}
