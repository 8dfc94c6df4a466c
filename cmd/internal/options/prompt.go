package options

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
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
// with its echo off (the Enter still moves to the next line). The terminal
// is given back as it was, also when ctx ends first (SIGINT: the reading
// goes on until the process exits, which it then does).
func readHidden(ctx context.Context, in *os.File, out io.Writer, prompt string) (string, error) {
	fd := int(in.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return "", errNoTerminal
	}
	hidden := *old
	hidden.Lflag &^= unix.ECHO
	// Line by line, with the terminal's own editing (backspace, ^U) and
	// ^C; the newline echoed although the rest is not.
	hidden.Lflag |= unix.ICANON | unix.ISIG | unix.ECHONL
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &hidden); err != nil {
		return "", fmt.Errorf("turning off the terminal's echo: %w", err)
	}
	defer unix.IoctlSetTermios(fd, unix.TCSETS, old)
	fmt.Fprint(out, prompt)

	type answer struct {
		line string
		err  error
	}
	got := make(chan answer, 1)
	go func() {
		line, err := readLine(in)
		got <- answer{line, err}
	}()
	select {
	case a := <-got:
		return a.line, a.err
	case <-ctx.Done():
		fmt.Fprintln(out)
		return "", ctx.Err()
	}
}

// readLine reads up to a newline, which it drops (with a carriage return
// before it). A terminal in canonical mode hands over a line per read; the
// loop is for lines longer than a read. End of input (^D) before any
// newline is an error: no password was given.
func readLine(r io.Reader) (string, error) {
	var b strings.Builder
	buf := make([]byte, 256)
	for b.Len() < 64<<10 {
		n, err := r.Read(buf)
		b.Write(buf[:n])
		if s := b.String(); strings.Contains(s, "\n") {
			line, _, _ := strings.Cut(s, "\n")
			return strings.TrimSuffix(line, "\r"), nil
		}
		if err == io.EOF || (err == nil && n == 0) {
			return "", errors.New("no password given")
		}
		if err != nil {
			return "", err
		}
	}
	return "", errors.New("the password is longer than 64 KiB")
}
