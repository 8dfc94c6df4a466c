package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// serveConfig parses serve's command line as the program does and
// returns the configuration it would run with.
func serveConfig(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var secret string
	cmd := *serveCommand
	cmd.Action = func(c *cli.Context) error {
		cfg, err := mirrorConfig(c)
		if err == nil {
			secret = cfg.Secret
		}
		return err
	}
	app := &cli.App{Name: "ocierofs-mirror", Commands: []*cli.Command{&cmd}, ExitErrHandler: func(*cli.Context, error) {}}
	err := app.Run(append([]string{"ocierofs-mirror", "serve", "--registry", "registry.example.com"}, args...))
	return secret, err
}

// TestSecretFile: --secret-file (or $OCIEROFS_WEBHOOK_SECRET_FILE) reads
// the webhook secret from a file, as a systemd credential or a Secret
// volume holds it; docs/deploy.md's unit and manifests rely on it.
func TestSecretFile(t *testing.T) {
	t.Setenv("OCIEROFS_WEBHOOK_SECRET", "")
	os.Unsetenv("OCIEROFS_WEBHOOK_SECRET")
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ content, want string }{
		{"s3cret\n", "s3cret"},
		{"s3cret\r\n", "s3cret"},
		{"s3cret", "s3cret"},
		{"two words \n", "two words "},
	} {
		got, err := serveConfig(t, "--secret-file", write("secret", tc.content))
		if err != nil || got != tc.want {
			t.Errorf("--secret-file holding %q: secret %q, %v; want %q", tc.content, got, err, tc.want)
		}
	}
	t.Setenv("OCIEROFS_WEBHOOK_SECRET_FILE", write("env-secret", "from-env\n"))
	if got, err := serveConfig(t); err != nil || got != "from-env" {
		t.Errorf("$OCIEROFS_WEBHOOK_SECRET_FILE: secret %q, %v", got, err)
	}
	os.Unsetenv("OCIEROFS_WEBHOOK_SECRET_FILE")

	for what, args := range map[string][]string{
		"missing file": {"--secret-file", filepath.Join(dir, "none")},
		"empty file":   {"--secret-file", write("empty", "\n")},
		"both":         {"--secret", "x", "--secret-file", write("secret", "y")},
	} {
		if got, err := serveConfig(t, args...); err == nil {
			t.Errorf("%s: secret %q, no error", what, got)
		} else if !strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error %q does not name the secret", what, err)
		}
	}
}
