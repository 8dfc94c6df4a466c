package options

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/term"
)

// errNoTerminal: a password is missing and there is no terminal to ask it on.
var errNoTerminal = errors.New("stdin is not a terminal")

// askPassword asks for the password of user at registry on the terminal
// that stdin is, as docker login and skopeo do for a user given without
// one: the prompt on stderr, the answer read with echo off. Elsewhere
// (a pipe, a file, /dev/null) it returns errNoTerminal at once, so that a
// script never hangs on a prompt nobody sees.
func askPassword(ctx context.Context, user, registry string) (string, error) {
	return readHidden(ctx, os.Stdin, os.Stderr, fmt.Sprintf("Password for %s at %s: ", user, registry))
}

// readHidden writes prompt to out and reads one line from the terminal in
// with its echo off. The terminal is given back as it was, also when ctx
// ends first (SIGINT: the reading goes on until the process exits, which
// it then does).
func readHidden(ctx context.Context, in *os.File, out io.Writer, prompt string) (string, error) {
	fd := int(in.Fd())
	if !term.IsTerminal(fd) {
		return "", errNoTerminal
	}
	old, err := term.GetState(fd)
	if err != nil {
		return "", errNoTerminal
	}
	fmt.Fprint(out, prompt)
	type answer struct {
		line []byte
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		line, err := term.ReadPassword(fd)
		got <- answer{line, err}
	}()
	select {
	case a := <-got:
		fmt.Fprintln(out) // the Enter, which was not echoed
		if a.err == io.EOF {
			return "", errors.New("no password given")
		}
		return string(a.line), a.err
	case <-ctx.Done():
		term.Restore(fd, old)
		fmt.Fprintln(out)
		return "", ctx.Err()
	}
}
