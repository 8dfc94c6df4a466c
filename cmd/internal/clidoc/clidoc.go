// Package clidoc writes the Markdown command reference of a urfave/cli
// program (docs/cli.md) from the program's own command and flag
// definitions, so that the reference cannot say other than --help.
//
// Only tests import it (TestCLIDoc in cmd/ocierofs and cmd/ocierofs-mirror
// compare the checked-in file with what it writes, and rewrite the file
// with UPDATE_DOCS=1, as `make docs` does): release binaries carry none of
// it. It does not use urfave/cli's own Markdown writer, which the release
// build leaves out (the urfave_cli_no_docs tag).
package clidoc

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
)

// Markdown returns the reference of app: its global options, then one
// section per visible command with its usage line, description and a
// table of its options (grouped by category where the flags have one).
// intro, if not empty, is Markdown printed under the title.
func Markdown(app *cli.App, title, intro string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "<!-- Generated from the command definitions by `make docs`; do not edit. -->\n\n")
	fmt.Fprintf(&b, "# %s\n\n", title)
	if intro != "" {
		fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(intro))
	}
	fmt.Fprintf(&b, "```\n%s [global options] COMMAND [options] [ARGUMENTS...]\n```\n\n", app.Name)
	commands := visible(app.Commands)
	b.WriteString("| Command | What it does |\n|---|---|\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s |\n", c.Name, anchor(app.Name+" "+c.Name), cell(escape(c.Usage)))
	}
	b.WriteString("\n")
	if flags := visibleFlags(app.Flags); len(flags) > 0 {
		b.WriteString("## Global options\n\nGiven before the command.\n\n")
		writeFlags(&b, flags, "###")
	}
	for _, c := range commands {
		writeCommand(&b, app.Name, c)
	}
	return b.Bytes()
}

// Check compares the file at path with want. With UPDATE_DOCS set in the
// environment it writes want there instead and reports nothing.
func Check(path string, want []byte) error {
	if os.Getenv("UPDATE_DOCS") != "" {
		return os.WriteFile(path, want, 0o644)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w (make docs writes it)", err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("%s is not what the command definitions say: run make docs and commit it", path)
	}
	return nil
}

func writeCommand(b *bytes.Buffer, prog string, c *cli.Command) {
	fmt.Fprintf(b, "## %s %s\n\n", prog, c.Name)
	if c.Usage != "" {
		fmt.Fprintf(b, "%s.\n\n", escape(upperFirst(c.Usage)))
	}
	usage := prog + " " + c.Name
	flags := visibleFlags(c.Flags)
	if len(flags) > 0 {
		usage += " [options]"
	}
	if c.ArgsUsage != "" {
		usage += " " + c.ArgsUsage
	}
	fmt.Fprintf(b, "```\n%s\n```\n\n", usage)
	if d := strings.TrimSpace(c.Description); d != "" {
		fmt.Fprintf(b, "%s\n\n", escape(d))
	}
	if c.SkipFlagParsing && len(flags) == 0 {
		fmt.Fprintf(b, "It reads its own options: `%s %s --help` lists them.\n\n", prog, c.Name)
		return
	}
	writeFlags(b, flags, "###")
}

// writeFlags writes one table of flags, or one per category under
// headings of level heading, in the order the categories first appear.
func writeFlags(b *bytes.Buffer, flags []cli.Flag, heading string) {
	var order []string
	groups := map[string][]cli.Flag{}
	for _, f := range flags {
		cat := ""
		if cf, ok := f.(cli.CategorizableFlag); ok {
			cat = cf.GetCategory()
		}
		if _, seen := groups[cat]; !seen {
			order = append(order, cat)
		}
		groups[cat] = append(groups[cat], f)
	}
	for _, cat := range order {
		if cat != "" {
			fmt.Fprintf(b, "%s %s\n\n", heading, upperFirst(cat))
		}
		b.WriteString("| Option | Default | Meaning |\n|---|---|---|\n")
		for _, f := range groups[cat] {
			writeFlag(b, f)
		}
		b.WriteString("\n")
	}
}

func writeFlag(b *bytes.Buffer, f cli.Flag) {
	df, ok := f.(cli.DocGenerationFlag)
	if !ok {
		fmt.Fprintf(b, "| %s | | |\n", cell(names(f.Names(), "")))
		return
	}
	placeholder, usage := unquote(df.GetUsage())
	if df.TakesValue() && placeholder == "" {
		placeholder = "value"
	}
	if !df.TakesValue() {
		placeholder = ""
	}
	def := df.GetDefaultText()
	if _, isBool := f.(*cli.BoolFlag); isBool && def == "false" {
		def = ""
	}
	if sf, ok := f.(cli.DocGenerationSliceFlag); ok && sf.IsSliceFlag() {
		usage += " (repeatable)"
	}
	if env := df.GetEnvVars(); len(env) > 0 {
		usage += " (environment: $" + strings.Join(env, ", $") + ")"
	}
	if def != "" {
		def = "`" + def + "`"
	}
	fmt.Fprintf(b, "| %s | %s | %s |\n", cell(names(df.Names(), placeholder)), cell(def), cell(escape(usage)))
}

// names renders a flag's names as typed: --long VALUE, -s.
func names(ns []string, placeholder string) string {
	var out []string
	for _, n := range ns {
		if n == "" {
			continue
		}
		dash := "--"
		if len(n) == 1 {
			dash = "-"
		}
		s := dash + n
		if placeholder != "" {
			s += " " + placeholder
		}
		out = append(out, "`"+s+"`")
	}
	return strings.Join(out, ", ")
}

// unquote takes the placeholder out of a usage text, as urfave/cli's
// help does: the first `word` in backquotes names the value.
func unquote(usage string) (string, string) {
	i := strings.IndexByte(usage, '`')
	if i < 0 {
		return "", usage
	}
	j := strings.IndexByte(usage[i+1:], '`')
	if j < 0 {
		return "", usage
	}
	name := usage[i+1 : i+1+j]
	return name, usage[:i] + name + usage[i+2+j:]
}

func visible(cmds []*cli.Command) []*cli.Command {
	var out []*cli.Command
	for _, c := range cmds {
		if !c.Hidden {
			out = append(out, c)
		}
	}
	return out
}

func visibleFlags(flags []cli.Flag) []cli.Flag {
	var out []cli.Flag
	for _, f := range flags {
		if vf, ok := f.(cli.VisibleFlag); ok && !vf.IsVisible() {
			continue
		}
		out = append(out, f)
	}
	return out
}

// cell makes s fit one cell of a Markdown table: one line, pipes escaped.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// escape keeps Markdown from reading plain help text as markup (<entry>
// as an HTML tag, ** as emphasis); `code spans` stay as they are.
func escape(s string) string {
	var b strings.Builder
	code := false
	for _, r := range s {
		switch {
		case r == '`':
			code = !code
		case !code && strings.ContainsRune(`\*<>[]`, r):
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// anchor is the id GitHub gives a heading: lower case, spaces to dashes,
// punctuation but dashes and underscores dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
