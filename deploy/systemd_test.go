package deploy

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const unitFile = "systemd/ocierofs-mirror.service"

// unitKeys reads a unit file's keys by section ("Service.ExecStart"), in
// order, values as written.
func unitKeys(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#") || strings.HasPrefix(l, ";"):
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = l[1 : len(l)-1]
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				t.Fatalf("%s: line %q", path, l)
			}
			keys[section+"."+k] = append(keys[section+"."+k], v)
		}
	}
	return keys
}

// TestSystemdUnit checks the unit with systemd's own verifier, with
// ExecStart pointed at a real ocierofs-mirror (the verifier wants the
// program to exist), and that it has what docs/deploy.md promises: a
// state directory, secrets as credentials, restarts.
func TestSystemdUnit(t *testing.T) {
	keys := unitKeys(t, unitFile)
	for _, want := range []struct{ key, value string }{
		{"Service.StateDirectory", "ocierofs"},
		{"Service.DynamicUser", "yes"},
		{"Service.Restart", "on-failure"},
		{"Service.LoadCredential", "webhook-secret:/etc/ocierofs/webhook-secret"},
		{"Service.LoadCredential", "config.json:/etc/ocierofs/docker-config.json"},
		{"Service.Environment", "DOCKER_CONFIG=%d"},
		{"Install.WantedBy", "multi-user.target"},
	} {
		if !slices.Contains(keys[want.key], want.value) {
			t.Errorf("%s: no %s=%s (has %q)", unitFile, want.key, want.value, keys[want.key])
		}
	}
	exec1 := keys["Service.ExecStart"]
	if len(exec1) != 1 || !strings.Contains(exec1[0], "--secret-file %d/webhook-secret") || !strings.Contains(exec1[0], "--nats-store /var/lib/ocierofs/") {
		t.Errorf("ExecStart %q: want the secret from the credential and the queue in the state directory", exec1)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze (Debian package systemd) to verify the unit with")
	}
	bin := buildMirror(t)
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	unit := strings.ReplaceAll(string(b), "ExecStart=/usr/local/bin/ocierofs-mirror ", "ExecStart="+bin+" ")
	p := filepath.Join(t.TempDir(), "ocierofs-mirror.service")
	if err := os.WriteFile(p, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", p).CombinedOutput()
	// The verifier exits 0 on warnings (an unknown key, a key in the
	// wrong section): any word of it on this unit is a failure.
	if err != nil || strings.Contains(string(out), "ocierofs-mirror") {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
	// And it does catch a mistake.
	bad := strings.Replace(unit, "Restart=on-failure", "Restart=on-failure\nRestartSecs=5s", 1)
	os.WriteFile(p, []byte(bad), 0o644)
	if out, _ := exec.Command(analyze, "verify", p).CombinedOutput(); !strings.Contains(string(out), "RestartSecs") {
		t.Errorf("systemd-analyze verify says nothing of an unknown key:\n%s", out)
	}
}

// TestSystemdUnitRun runs the unit's ExecStart as systemd would: %d is a
// credentials directory holding the webhook secret and a docker
// config.json, the state directory and /etc/ocierofs directories of the
// test, mirror.conf the one beside the unit. Only --listen is added, on a
// free port: the probes, metrics and the secret must work.
func TestSystemdUnitRun(t *testing.T) {
	bin := buildMirror(t)
	keys := unitKeys(t, unitFile)
	root := t.TempDir()
	creds := filepath.Join(root, "credentials")
	etc := filepath.Join(root, "etc")
	state := filepath.Join(root, "state")
	for _, d := range []string{creds, etc, state} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "unit-s3cret"
	for name, content := range map[string]string{
		filepath.Join(creds, "webhook-secret"): secret + "\n",
		filepath.Join(creds, "config.json"):    `{"auths":{"registry.example.com":{"auth":"cm9ib3Q6cGFzcw=="}}}`,
	} {
		os.WriteFile(name, []byte(content), 0o600)
	}
	conf, err := os.ReadFile("systemd/mirror.conf")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(etc, "mirror.conf"), conf, 0o600)
	expand := func(s string) string {
		s = strings.ReplaceAll(s, "%d", creds)
		s = strings.ReplaceAll(s, "/etc/ocierofs/", etc+"/")
		return strings.ReplaceAll(s, "/var/lib/ocierofs/", state+"/")
	}
	argv := strings.Fields(expand(keys["Service.ExecStart"][0]))
	if argv[0] != "/usr/local/bin/ocierofs-mirror" {
		t.Fatalf("ExecStart runs %s", argv[0])
	}
	port := freePort(t)
	lp := localPod{url: fmt.Sprintf("http://127.0.0.1:%d", port), secret: secret,
		args: append(argv[1:], fmt.Sprintf("--listen=127.0.0.1:%d", port)),
		env:  []string{"PATH=/usr/bin:/bin", "HOME=" + root, "TMPDIR=" + t.TempDir()}}
	for _, e := range keys["Service.Environment"] {
		lp.env = append(lp.env, expand(e))
	}
	p := start(t, lp.env, bin, lp.args...)
	checkServing(t, p, lp, true)
	if _, err := os.Stat(filepath.Join(state, "nats")); err != nil {
		t.Errorf("the queue is not in the state directory: %v", err)
	}
}
