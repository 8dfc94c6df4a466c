package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"
)

// mirrorProgram is the registry mirror: serve and sync live in a program
// of their own, so that this one does not carry the NATS server and the
// Prometheus client: they cost an image build memory and start-up time
// for nothing, and make the binary much larger (docs/performance.md,
// release builds).
const mirrorProgram = "ocierofs-mirror"

var (
	serveCommand = mirrorCommand("serve", "convert every image pushed to a registry: notifications in, EROFS twins out")
	syncCommand  = mirrorCommand("sync", "convert the images of a registry that have no up-to-date EROFS twin yet")
)

// mirrorCommand runs `ocierofs-mirror NAME ARGS...` in place of this
// process, as git runs git-NAME: the same arguments, environment, exit
// status and signals.
func mirrorCommand(name, usage string) *cli.Command {
	return &cli.Command{
		Name:            name,
		Usage:           usage + " (runs " + mirrorProgram + " " + name + ")",
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			path, err := findMirror()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			// argv[0] "ocierofs": its help and errors name the
			// command as typed.
			argv := append([]string{c.App.Name, name}, c.Args().Slice()...)
			if err := syscall.Exec(path, argv, os.Environ()); err != nil {
				return fmt.Errorf("%s: run %s: %w", name, path, err)
			}
			return nil // not reached: Exec returns only on failure
		},
	}
}

// findMirror looks for ocierofs-mirror next to this executable first (a
// release or `make build` puts both in one directory), then on PATH.
func findMirror() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), mirrorProgram)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	p, err := exec.LookPath(mirrorProgram)
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", fmt.Errorf("the registry mirror is the %s program, found neither next to this one nor on PATH "+
				"(make build or make install in a clone builds both)", mirrorProgram)
		}
		return "", err
	}
	return p, nil
}
