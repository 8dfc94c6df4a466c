package clidoc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestMarkdown: a command's usage line, description, flags with their
// placeholder, default, environment and category, escaped where Markdown
// would read them as markup; hidden commands and flags left out.
func TestMarkdown(t *testing.T) {
	app := &cli.App{
		Name:  "prog",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "verbose", Usage: "say more"}},
		Commands: []*cli.Command{{
			Name:        "build",
			Usage:       "build an image",
			ArgsUsage:   "OUT IN",
			Description: "Writes <entry>.erofs; **/x globs and `a|b <c>` stay.",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "compress", Aliases: []string{"z"}, Value: "none", Usage: "codec: lz4|zstd"},
				&cli.StringFlag{Name: "max-size", Usage: "bound in `SIZE`", EnvVars: []string{"MAX"}},
				&cli.StringSliceFlag{Name: "include", Usage: "glob", Category: "registry"},
				&cli.IntFlag{Name: "secret", Hidden: true},
			},
		}, {Name: "internal", Hidden: true}},
	}
	got := string(Markdown(app, "prog reference", "intro"))
	for _, want := range []string{
		"# prog reference\n\nintro\n",
		"| [`build`](#prog-build) | build an image |",
		"| `--verbose` |  | say more |",
		"## prog build\n\nBuild an image.\n\n```\nprog build [options] OUT IN\n```\n",
		"Writes \\<entry\\>.erofs; \\*\\*/x globs and `a|b <c>` stay.",
		"| `--compress value`, `-z value` | `\"none\"` | codec: lz4\\|zstd |",
		"| `--max-size SIZE` |  | bound in SIZE (environment: $MAX) |",
		"### Registry\n\n| Option | Default | Meaning |\n|---|---|---|\n| `--include value` |  | glob (repeatable) |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in\n%s", want, got)
		}
	}
	for _, no := range []string{"internal", "secret"} {
		if strings.Contains(got, no) {
			t.Errorf("hidden %q shown:\n%s", no, got)
		}
	}
}

// TestCheck: a stale file is an error naming make docs; UPDATE_DOCS
// rewrites it.
func TestCheck(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cli.md")
	if err := os.WriteFile(p, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Check(p, []byte("new\n")); err == nil || !strings.Contains(err.Error(), "make docs") {
		t.Errorf("stale file: %v", err)
	}
	t.Setenv("UPDATE_DOCS", "1")
	if err := Check(p, []byte("new\n")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("UPDATE_DOCS", "")
	if err := Check(p, []byte("new\n")); err != nil {
		t.Errorf("after the update: %v", err)
	}
}
