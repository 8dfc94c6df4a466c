package options

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

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

// Setup makes app take its command line as docker, crane and skopeo users
// type it (cobra's habits): flags after a command's arguments count
// (Intersperse), short flags combine (ls -lR), and a mistyped flag gets one
// line naming it instead of the command's whole help on stdout, which
// would land in a script's -o json.
func Setup(app *cli.App) {
	app.UseShortOptionHandling = true
	app.OnUsageError = usageError
	for _, c := range app.Commands {
		c.UseShortOptionHandling = true
		c.OnUsageError = usageError
	}
}

func usageError(c *cli.Context, err error, _ bool) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
		// Go's flag package names it with one dash: say what was typed.
		typed := name
		for _, a := range os.Args {
			if a == "--"+strings.TrimPrefix(name, "-") || strings.HasPrefix(a, "--"+strings.TrimPrefix(name, "-")+"=") {
				typed = strings.SplitN(a, "=", 2)[0]
			}
		}
		msg = "unknown flag " + typed
	}
	return fmt.Errorf("%s (%s --help)", msg, strings.TrimSpace(c.Command.HelpName))
}

// Args returns args with the flags given after a command's arguments
// moved before them, where urfave/cli v2 would take them for arguments:
// `convert SRC --plain-http` converted SRC into an image named
// "--plain-http", and `convert SRC --help` converted it too. "--" still
// ends the flags, and a lone "-" (stdin) is an argument. -v (--version)
// before a command is an error: it printed the version, exit 0, and the
// command did not run (crane's -v is --verbose).
func Args(app *cli.App, args []string) ([]string, error) {
	i := 1
	version := ""
	for i < len(args) && isFlag(args[i]) {
		if args[i] == "--" {
			return args, nil
		}
		if args[i] == "-v" || args[i] == "--version" || args[i] == "-version" {
			version = args[i]
		}
		if takesValue(app.Flags, args[i]) {
			i++
		}
		i++
	}
	if i >= len(args) {
		return args, nil
	}
	if version != "" {
		return nil, fmt.Errorf("%s prints the version and runs no command: drop it before %q", version, args[i])
	}
	cmd := app.Command(args[i])
	if cmd == nil || cmd.SkipFlagParsing {
		return args, nil
	}
	var flags, rest []string
	dashes := false // a "--" ends the flags
	for j := i + 1; j < len(args); j++ {
		a := args[j]
		switch {
		case a == "--":
			rest = append(rest, args[j+1:]...)
			dashes = true
			j = len(args)
		case a == "-h" || a == "--help" || a == "-help":
			// The command's help, whatever else is there: urfave/cli
			// would take an argument after it for a subcommand.
			return append(slices.Clip(args[:i+1]), a), nil
		case isFlag(a):
			flags = append(flags, a)
			if takesValue(cmd.Flags, a) {
				if j+1 >= len(args) || args[j+1] == "--" {
					// Moved in front, it would take the first
					// argument for its value (merge OUT A B -L
					// wrote its image over A).
					return nil, fmt.Errorf("flag %s needs a value (%s %s --help)", a, app.Name, cmd.Name)
				}
				flags = append(flags, args[j+1])
				j++
			}
		default:
			rest = append(rest, a)
		}
	}
	out := append(slices.Clip(args[:i+1]), flags...)
	if dashes {
		// Before every argument: once urfave/cli has met the first
		// one, a "--" would be an argument itself.
		out = append(out, "--")
	}
	return append(out, rest...), nil
}

func isFlag(a string) bool { return len(a) > 1 && a[0] == '-' }

// takesValue reports whether flag a (as typed) is one of flags that takes
// its value from the next argument.
func takesValue(flags []cli.Flag, a string) bool {
	name := strings.TrimLeft(a, "-")
	if strings.Contains(name, "=") {
		return false
	}
	for _, f := range flags {
		if slices.Contains(f.Names(), name) {
			_, isBool := f.(*cli.BoolFlag)
			return !isBool
		}
	}
	// Short flags together (-qo json): the last one may take the value.
	if len(name) > 1 && !strings.HasPrefix(a, "--") {
		return takesValue(flags, "-"+name[len(name)-1:])
	}
	return false
}

// InCategory returns copies of flags under the help heading cat, so that
// a command with many flags lists them in groups (the shared definitions
// are left as they are). Every urfave/cli flag type has a Category field.
func InCategory(cat string, flags ...cli.Flag) []cli.Flag {
	out := make([]cli.Flag, len(flags))
	for i, f := range flags {
		v := reflect.ValueOf(f).Elem()
		c := reflect.New(v.Type())
		c.Elem().Set(v)
		c.Elem().FieldByName("Category").SetString(cat)
		out[i] = c.Interface().(cli.Flag)
	}
	return out
}
