package main

import (
	"strings"
	"testing"
)

// TestHelpCommand: `ocierofs help` and `ocierofs help COMMAND` print what
// --help and COMMAND --help print, as docker, crane and skopeo take them;
// serve and sync show the mirror program's help; an unknown command is one
// line and exit status 1.
func TestHelpCommand(t *testing.T) {
	b := bin(t) // beside ocierofs-mirror
	for _, tc := range []struct{ help, want []string }{
		{[]string{"help"}, []string{"--help"}},
		{[]string{"help", "convert"}, []string{"convert", "--help"}},
		{[]string{"--verbose", "help", "ls"}, []string{"ls", "--help"}},
		{[]string{"help", "serve"}, []string{"serve", "--help"}},
		{[]string{"help", "mkfs.erofs"}, []string{"mkfs.erofs", "--help"}},
	} {
		out, e, code := run(t, b, tc.help...)
		want, _, wantCode := run(t, b, tc.want...)
		if code != 0 || e != "" || out != want || wantCode != 0 || len(out) < 100 {
			t.Errorf("ocierofs %s: exit %d, stderr %q, printed\n%s\nwant what ocierofs %s printed (exit %d):\n%s",
				strings.Join(tc.help, " "), code, e, out, strings.Join(tc.want, " "), wantCode, want)
		}
	}
	if out, _, _ := run(t, b, "help", "serve"); !strings.Contains(out, "--nats-store") {
		t.Errorf("ocierofs help serve is not the mirror's help:\n%s", out)
	}
	if out, _, _ := run(t, b, "help"); !strings.Contains(out, "   help ") {
		t.Errorf("ocierofs help does not list help among the commands:\n%s", out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "nosuch"}, "ocierofs: no command \"nosuch\" (ocierofs help lists them)\n"},
		{[]string{"help", "convert", "ls"}, "ocierofs: help takes one command, not 2 words: [\"convert\" \"ls\"]\n"},
	} {
		out, e, code := run(t, b, tc.args...)
		if code != 1 || out != "" || e != tc.want {
			t.Errorf("ocierofs %s: exit %d, stdout %q, stderr %q; want exit 1 and %q",
				strings.Join(tc.args, " "), code, out, e, tc.want)
		}
	}
}
