package progress

import (
	"bytes"
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/convert"
)

func TestProgressLine(t *testing.T) {
	for _, tc := range []struct {
		p    convert.Progress
		want string
	}{
		// A waiting layer says why; sizes are docker's.
		{convert.Progress{Source: "sha256:0123456789abcdef0123", Stage: convert.StageWaiting, Total: 4e6},
			"sha256:0123456789ab waiting for a job [          ] 0B/4MB   0.0s"},
		{convert.Progress{Source: "sha256:0123456789abcdef0123", Stage: convert.StageConverting, Read: 1e6, Total: 4e6},
			"sha256:0123456789ab converting        [=>        ] 1MB/4MB   1.5s"},
		// An upload shows the bytes sent.
		{convert.Progress{Source: "sha256:a,sha256:b,sha256:c", Stage: convert.StageUploading, Read: 2e6, Total: 4e6},
			"3 layers            uploading         [====>     ] 2MB/4MB   1.5s"},
		{convert.Progress{Source: "sha256:ab", Stage: convert.StagePassed, Total: 2e6},
			"sha256:ab           passed through    [==========] 0B/2MB   1.5s"},
		// A stream longer than its descriptor says does not overflow the bar.
		{convert.Progress{Source: "sha256:ab", Stage: convert.StageConverting, Read: 9e6, Total: 2e6},
			"sha256:ab           converting        [==========] 9MB/2MB   1.5s"},
		{convert.Progress{Source: "sha256:ab", Stage: convert.StageInterrupted, Read: 300, Total: 69_800_000},
			"sha256:ab           interrupted       [          ] 300B/69.8MB   1.5s"},
	} {
		el := 1500 * time.Millisecond
		if tc.p.Stage == convert.StageWaiting {
			el = 0
		}
		if got := progressLine(tc.p, 10, el); got != tc.want {
			t.Errorf("progressLine(%+v)\n got %q\nwant %q", tc.p, got, tc.want)
		}
	}
}

// syncBuffer is a bytes.Buffer the view's drawing goroutine and the test
// can share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var ansi = regexp.MustCompile(`\x1b\[[0-9]*[A-Za-z]`)

// TestProgressView converts testdata/busybox with the view as the
// converter's Progress hook and checks what a terminal would show at the
// end: one line per layer, every one done, with its whole size read; and
// that each redraw first moves the cursor back over the previous frame.
func TestProgressView(t *testing.T) {
	p, err := layout.FromPath("../../../testdata/busybox")
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	img, err := p.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}

	var out syncBuffer
	v := NewView(&out)
	var mu sync.Mutex
	seen := map[string][]convert.Stage{}
	conv, err := convert.NewConverter(convert.ImageOptions{Jobs: 2, TempDir: t.TempDir(), Progress: func(p convert.Progress) {
		mu.Lock()
		if s := seen[p.Source]; len(s) == 0 || s[len(s)-1] != p.Stage {
			seen[p.Source] = append(s, p.Stage)
		}
		mu.Unlock()
		v.Update(p)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer conv.Close()
	_, rep, err := conv.Image(context.Background(), img, im.Manifests[0])
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // at least one redraw of a full frame
	v.Close()
	v.Close() // idempotent: deferred and explicit calls both happen

	for _, l := range m.Layers {
		got := seen[l.Digest.String()]
		want := []convert.Stage{convert.StageWaiting, convert.StageConverting, convert.StageDone}
		if strings.Join(stages(got), ",") != strings.Join(stages(want), ",") {
			t.Errorf("layer %s: stages %v, want %v", l.Digest, got, want)
		}
	}

	s := out.String()
	if !strings.Contains(s, "\x1b["+strconv.Itoa(len(m.Layers))+"A") {
		t.Errorf("no redraw moves the cursor up %d lines:\n%q", len(m.Layers), s)
	}
	// The last frame is the last len(layers) lines.
	lines := strings.Split(strings.TrimSuffix(ansi.ReplaceAllString(s, ""), "\n"), "\n")
	if len(lines) < len(m.Layers) {
		t.Fatalf("%d lines drawn, want at least %d", len(lines), len(m.Layers))
	}
	last := lines[len(lines)-len(m.Layers):]
	for i, l := range m.Layers {
		line := last[i]
		total := HumanSize(rep.Layers[i].Size)
		if !strings.HasPrefix(line, l.Digest.String()[:19]) || !strings.Contains(line, " done ") ||
			!strings.Contains(line, total+"/"+total) {
			t.Errorf("final line of layer %s: %q, want it done with its %s sent", l.Digest, line, total)
		}
	}
}

func stages(s []convert.Stage) []string {
	var out []string
	for _, x := range s {
		out = append(out, string(x))
	}
	return out
}

// TestIsTerminal: a pseudo-terminal is one, unless TERM=dumb says it
// cannot move the cursor; a pipe is none.
func TestIsTerminal(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	pts, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR, 0)
	if err != nil {
		t.Skipf("pseudo-terminal %d: %v", n, err)
	}
	defer pts.Close()
	t.Setenv("TERM", "xterm")
	if !IsTerminal(pts) {
		t.Error("a pseudo-terminal is not a terminal")
	}
	t.Setenv("TERM", "dumb")
	if IsTerminal(pts) {
		t.Error("TERM=dumb: a terminal that cannot redraw lines is taken for one")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	t.Setenv("TERM", "xterm")
	if IsTerminal(w) {
		t.Error("a pipe is a terminal")
	}
}

// TestEvery: off a terminal, a converting layer is logged at most once per
// interval, from its second update on; other stages are not.
func TestEvery(t *testing.T) {
	var lines []string
	f := Every(50*time.Millisecond, func(s string) { lines = append(lines, s) })
	p := convert.Progress{Source: "sha256:0123456789abcdef0123", Stage: convert.StageConverting, Read: 1e6, Total: 3e6}
	f(p) // the start: logged by the converter itself
	f(p)
	if len(lines) != 0 {
		t.Fatalf("logged at once: %q", lines)
	}
	time.Sleep(60 * time.Millisecond)
	p.Read = 2e6
	f(p)
	f(p)
	f(convert.Progress{Source: p.Source, Stage: convert.StageUploading})
	if want := "layer sha256:0123456789ab: converting, 2MB of 3MB read"; len(lines) != 1 || lines[0] != want {
		t.Errorf("logged %q, want [%q]", lines, want)
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0B", 999: "999B", 1000: "1kB", 12_345: "12.3kB", 69_800_000: "69.8MB", 1_460_000_000: "1.46GB"} {
		if got := HumanSize(n); got != want {
			t.Errorf("HumanSize(%d) = %q, want %q", n, got, want)
		}
	}
}
