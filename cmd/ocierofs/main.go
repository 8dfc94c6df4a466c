// Command ocierofs converts container image layers into EROFS images and
// looks inside them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/logs"
	"github.com/urfave/cli/v2"

	"github.com/ocierofs/ocierofs/cmd/internal/options"
	"github.com/ocierofs/ocierofs/cmd/internal/version"
)

func main() {
	if os.Getenv("GOGC") == "" {
		tuneGC(bigHeap, bigHeapGCPercent)
	}
	if filepath.Base(os.Args[0]) == mkfsErofsName {
		os.Exit(mkfsErofs(mkfsErofsName, os.Args[1:]))
	}
	app := newApp()
	args, err := options.Args(app, os.Args)
	if err == nil {
		err = app.Run(args)
	}
	if err != nil {
		sig, interrupt := interrupted()
		switch {
		case interrupt && errors.Is(err, context.Canceled):
			// The command stopped for the signal and removed what it
			// made; "context canceled" says no more.
			err = fmt.Errorf("interrupted by %s", signalName(sig))
		case interrupt:
			err = fmt.Errorf("%w (interrupted by %s)", err, signalName(sig))
		}
		if msg := err.Error(); strings.Contains(msg, "server gave HTTP response to HTTPS client") {
			err = fmt.Errorf("%w (a plain-HTTP registry: add --plain-http)", err)
		}
		if msg := err.Error(); msg != "" { // mkfs.erofs has said it
			fmt.Fprintf(os.Stderr, "ocierofs: %s\n", msg)
		}
		pprof.StopCPUProfile()
		trace.Stop()
		if interrupt {
			// Die of the signal, so that a calling shell script stops
			// too (bash goes on after a child that merely exits 130).
			signal.Reset(sig)
			killSelf(sig)
			time.Sleep(time.Second) // for it to arrive; else exit as a shell reports it
			os.Exit(128 + int(sig))
		}
		os.Exit(options.ExitCode(err))
	}
}

// newApp returns the command line of ocierofs: its commands and global
// flags, set up as options.Setup makes both programs take them. The
// reference docs/cli.md is generated from it (TestCLIDoc).
func newApp() *cli.App {
	app := &cli.App{
		Name:  "ocierofs",
		Usage: "convert container images and tar layers into EROFS",
		Description: "ocierofs builds EROFS images from OCI/Docker tar layers, exactly as the Linux\n" +
			"kernel mounts them, and reads them back for inspection and verification.",
		Version:         version.String(),
		HideHelpCommand: true,
		Commands: []*cli.Command{
			convertCommand,
			cacheCommand,
			serveCommand,
			syncCommand,
			mkfsCommand,
			mkfsErofsCommand,
			mergeCommand,
			inspectCommand,
			lsCommand,
			catCommand,
			extractCommand,
			verifyCommand,
			checkCommand,
			lazyMountCommand,
			lazyUmountCommand,
			version.Command,
			helpCommand,
		},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "cpuprofile", Usage: "write a CPU profile (go tool pprof) to `FILE`"},
			&cli.StringFlag{Name: "memprofile", Usage: "write a heap profile (go tool pprof -sample_index=alloc_space) to `FILE` at the end"},
			&cli.StringFlag{Name: "trace", Usage: "write an execution trace (go tool trace: where goroutines wait, how busy the workers are) to `FILE`"},
			&cli.BoolFlag{Name: "verbose", Usage: "log every registry request and response on stderr (credentials and tokens redacted)"},
			// urfave/cli adds --help itself only where no command is
			// named help; helpCommand is.
			cli.HelpFlag,
		},
		Before:          startProfile,
		After:           stopProfile,
		CommandNotFound: options.CommandNotFound,
		ExitErrHandler:  func(*cli.Context, error) {},
	}
	options.Setup(app)
	return app
}

// helpCommand is `help [COMMAND]`, as docker, crane and skopeo take it:
// the list of commands, or what COMMAND --help prints. The forwarders
// (serve, sync, mkfs.erofs) parse their own flags, so their help is what
// they print for --help.
var helpCommand = &cli.Command{
	Name:      "help",
	Usage:     "list the commands, or show one command's help",
	ArgsUsage: "[COMMAND]",
	// Else urfave/cli gives it a help subcommand of its own, and
	// ShowCommandHelp would look for COMMAND among those.
	HideHelpCommand: true,
	Action: func(c *cli.Context) error {
		switch c.NArg() {
		case 0:
			return cli.ShowAppHelp(c)
		case 1:
		default:
			return fmt.Errorf("help takes one command, not %d words: %q", c.NArg(), c.Args().Slice())
		}
		name := c.Args().First()
		cmd := c.App.Command(name)
		if cmd == nil {
			return fmt.Errorf("no command %q (%s help lists them)", name, c.App.Name)
		}
		if !cmd.SkipFlagParsing {
			return cli.ShowCommandHelp(c, name)
		}
		set := flag.NewFlagSet(name, flag.ContinueOnError)
		if err := set.Parse([]string{"--", "--help"}); err != nil {
			return err
		}
		cc := cli.NewContext(c.App, set, c)
		cc.Command = cmd
		return cmd.Action(cc)
	},
}

// startProfile starts the CPU profile of --cpuprofile; stopProfile (or an
// error exit) writes it.
func startProfile(c *cli.Context) error {
	if c.Bool("verbose") {
		logs.Debug.SetOutput(os.Stderr)
		logs.Warn.SetOutput(os.Stderr)
	}
	if name := c.String("trace"); name != "" {
		f, err := os.Create(name)
		if err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
		if err := trace.Start(f); err != nil {
			return fmt.Errorf("--trace: %w", err)
		}
	}
	name := c.String("cpuprofile")
	if name == "" {
		return nil
	}
	f, err := os.Create(name)
	if err != nil {
		return fmt.Errorf("--cpuprofile: %w", err)
	}
	return pprof.StartCPUProfile(f)
}

func stopProfile(c *cli.Context) error {
	pprof.StopCPUProfile()
	trace.Stop()
	if name := c.String("memprofile"); name != "" {
		f, err := os.Create(name)
		if err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
		defer f.Close()
		return pprof.Lookup("allocs").WriteTo(f, 0)
	}
	return nil
}
