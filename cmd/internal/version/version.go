// Package version names the build of ocierofs's programs: the release or
// commit they were built from and the Go toolchain that built them, for
// `ocierofs --version` and `ocierofs version`.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// Version is the name of the release or commit, set by the Makefile with
// -ldflags "-X …/version.Version=$(git describe --tags --always --dirty)".
// A plain `go build` leaves it empty, and String looks in the build
// information instead.
var Version string

// String returns the build's name, then the Go version and platform in
// parentheses: "v0.4.0 (go1.26.8 linux/amd64)", "0123456789ab+dirty (…)"
// or "devel (…)".
func String() string {
	return name(Version, readBuildInfo()) + " (" + runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH + ")"
}

// FromBuildInfo names a build from its build information (another
// program's, read with debug/buildinfo), as String does its own.
func FromBuildInfo(bi *debug.BuildInfo) string { return name("", bi) }

func readBuildInfo() *debug.BuildInfo {
	bi, _ := debug.ReadBuildInfo()
	return bi
}

// name picks the most precise name there is: the one set at link time;
// the module version of a `go install …@v1.2.3`; the commit that `go build`
// stamped from a git checkout (-buildvcs); or "devel".
func name(set string, bi *debug.BuildInfo) string {
	if set != "" {
		return set
	}
	if bi == nil {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += "+dirty"
	}
	return rev
}

// Command is `version`: the line --version prints, as docker, crane and
// nerdctl have both.
var Command = &cli.Command{
	Name:  "version",
	Usage: "print the version of this build",
	Action: func(c *cli.Context) error {
		if c.NArg() > 0 {
			return fmt.Errorf("version takes no arguments, got %q", c.Args().First())
		}
		cli.VersionPrinter(c)
		return nil
	},
}
