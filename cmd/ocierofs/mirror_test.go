package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestMirrorCommands: ocierofs serve and sync run ocierofs-mirror with the
// same arguments and exit status; without it they fail with one clear
// error; and ocierofs itself links neither NATS nor Prometheus (the point
// of the split: 6 MB less memory for every image build).
func TestMirrorCommands(t *testing.T) {
	t.Parallel()
	dir := programs(t)
	oc := filepath.Join(dir, "ocierofs")

	mods, err := exec.Command("go", "version", "-m", oc).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, mods)
	}
	for _, m := range []string{"github.com/nats-io/", "github.com/prometheus/"} {
		if strings.Contains(string(mods), m) {
			t.Errorf("ocierofs links %s*: it belongs to ocierofs-mirror only", m)
		}
	}

	// Help comes from the mirror (--nats-store), naming the command as
	// typed; the mirror run by itself names itself.
	out, _, code := run(t, oc, "serve", "--help")
	if code != 0 || !strings.Contains(out, "ocierofs serve [command options]") || !strings.Contains(out, "--nats-store") {
		t.Errorf("ocierofs serve --help: exit %d, printed\n%s", code, out)
	}
	// Its fifty flags in groups, each under its heading.
	for _, heading := range []string{"Mirror", "Queue", "HTTP", "Source and registry", "EROFS image", "Converted image"} {
		if !strings.Contains(out, "\n   "+heading+"\n") {
			t.Errorf("ocierofs serve --help has no group %q", heading)
		}
	}
	out, _, code = run(t, filepath.Join(dir, "ocierofs-mirror"), "serve", "--help")
	if code != 0 || !strings.Contains(out, "ocierofs-mirror serve [command options]") {
		t.Errorf("ocierofs-mirror serve --help: exit %d, printed\n%s", code, out)
	}

	// sync through the forwarder against a real registry: it converts the
	// one image, then finds its twin up to date.
	host, _ := pushBusybox(t)
	for i, want := range []string{"convert", "up-to-date"} {
		out, errOut, code := run(t, oc, "sync", "--registry", host, "--plain-http", "-q", "-o", "json")
		if code != 0 {
			t.Fatalf("sync %d: exit %d\n%s", i, code, errOut)
		}
		var rep struct {
			Items []struct{ Repository, Tag, Action, Result string }
		}
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("sync %d printed %q: %v", i, out, err)
		}
		if len(rep.Items) != 1 || rep.Items[0].Repository != "e2e/bb" || rep.Items[0].Action != want {
			t.Errorf("sync %d: %+v, want e2e/bb:1.0 %s", i, rep.Items, want)
		}
	}
	twin, err := name.ParseReference(host + "/e2e/bb:1.0-erofs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Head(twin); err != nil {
		t.Errorf("HEAD %s after sync: %v", twin, err)
	}

	// The mirror's exit status passes through. The registry answers 404
	// to everything: an error no retry takes (an unreachable one would
	// be retried for seconds).
	refusing := httptest.NewServer(http.NotFoundHandler())
	defer refusing.Close()
	bad := strings.TrimPrefix(refusing.URL, "http://")
	if _, errOut, code := run(t, oc, "sync", "--registry", bad, "--plain-http", "-q"); code != 1 || !strings.HasPrefix(errOut, "ocierofs: catalog of "+bad+": ") {
		t.Errorf("sync of an unreachable registry: exit %d, stderr %q; want 1 from ocierofs-mirror", code, errOut)
	}

	// Numbers of the file as flags take them: NATS's syntax reads an
	// unquoted 20G as the float 2e10 (review 20-d: "2e+10" was refused).
	conf := filepath.Join(t.TempDir(), "m.conf")
	if err := os.WriteFile(conf, []byte("registry: \""+bad+"\"\nplainHTTP: true\nconvert { \"max-layer-size\": 20G, jobs: 2 }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := run(t, oc, "sync", "--config", conf, "-q"); code != 1 || !strings.HasPrefix(errOut, "ocierofs: catalog of "+bad+": ") {
		t.Errorf("sync with convert options in its file: exit %d, stderr %q; want the catalog's error, past the options", code, errOut)
	}

	// Alone, with no ocierofs-mirror on PATH either.
	alone := filepath.Join(t.TempDir(), "ocierofs")
	b, err := os.ReadFile(oc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(alone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(alone, "serve", "--listen", ":0")
	cmd.Env = append(os.Environ(), "PATH="+t.TempDir())
	msg, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(msg), "serve: the registry mirror is the ocierofs-mirror program") {
		t.Errorf("serve without ocierofs-mirror: %v, printed %q", err, msg)
	}
}
