package main

import (
	"fmt"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/mkfserofs"
	"github.com/ocierofs/ocierofs/cmd/internal/version"
	"github.com/ocierofs/ocierofs/convert/mkfs"
)

// mkfsErofsName is the name under which ocierofs stands in for mkfs.erofs
// (a symbolic link to it, found on PATH by containerd's EROFS differ).
const mkfsErofsName = "mkfs.erofs"

var mkfsErofsCommand = &cli.Command{
	Name:            mkfsErofsName,
	Usage:           "build an image from mkfs.erofs's command line (what ocierofs does when called mkfs.erofs)",
	ArgsUsage:       "[mkfs.erofs OPTIONS] FILE [SOURCE]",
	SkipFlagParsing: true,
	Action: func(c *cli.Context) error {
		if code := mkfsErofs(mkfsErofsName, c.Args().Slice()); code != 0 {
			return cli.Exit("", code)
		}
		return nil
	},
}

// mkfsErofs runs one mkfs.erofs command line (package mkfserofs says which
// options it takes) and returns the exit status: 0, or 1 after printing
// the error.
func mkfsErofs(prog string, args []string) int {
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "%s: %s\n", prog, fmt.Sprintf(format, a...))
		return 1
	}
	c, err := mkfserofs.Parse(args, os.Getenv)
	if err != nil {
		fail("%v", err)
		fmt.Fprintf(os.Stderr, "Try '%s --help' for more information.\n", prog)
		return 1
	}
	switch {
	case c.Help:
		mkfserofs.Usage(os.Stdout, prog)
		return 0
	case c.Version:
		fmt.Printf("%s (ocierofs) %s\n", prog, version.String())
		return 0
	}
	if c.Input != "-" {
		fi, err := os.Stat(c.Input)
		switch {
		case err != nil:
			return fail("%v", err)
		case c.Tar && fi.IsDir():
			return fail("--tar: SOURCE %s is a directory, not a tar", c.Input)
		case !c.Tar && !fi.IsDir():
			return fail("SOURCE %s is not a directory: without --tar, mkfs.erofs rebuilds from EROFS images, which ocierofs does not (give --tar for a tar)", c.Input)
		}
	}
	start := time.Now()
	res, err := mkfs.Build(c.Output, c.Input, c.Options)
	if err != nil {
		return fail("%s: %v", c.Output, err)
	}
	if !c.Quiet {
		for _, w := range res.Warnings {
			fmt.Fprintf(os.Stderr, "%s: warning: %s\n", prog, w)
		}
		fmt.Fprintf(os.Stderr, "%s: %s: %d entries in %s\n", prog, c.Output, res.Entries, time.Since(start).Round(time.Millisecond))
	}
	return 0
}
