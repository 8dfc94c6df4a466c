// Package progress draws the per-layer progress of a conversion on a
// terminal: stage, bytes read and a bar for each layer, redrawn in place.
package progress

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/ocierofs/ocierofs/convert"
)

// IsTerminal reports whether f is a terminal (the progress display is
// drawn only there; elsewhere convert logs one line per step).
func IsTerminal(f *os.File) bool {
	if os.Getenv("TERM") == "dumb" { // no cursor movement (Emacs shells, CI logs)
		return false
	}
	return term.IsTerminal(int(f.Fd()))
}

// View draws one line per layer — stage, bytes read of the source
// blob, a bar — and redraws them in place a few times a second.
type View struct {
	w      io.Writer
	mu     sync.Mutex
	order  []string
	layers map[string]convert.Progress
	start  map[string]time.Time
	end    map[string]time.Time
	drawn  int // lines drawn last time
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	width  int
}

func NewView(w io.Writer) *View {
	v := &View{w: w, layers: map[string]convert.Progress{}, start: map[string]time.Time{},
		end: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{}), width: 24}
	go func() {
		defer close(v.done)
		t := time.NewTicker(150 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				v.draw()
			case <-v.stop:
				v.draw()
				return
			}
		}
	}()
	return v
}

// Update is the converter's Progress hook (convert.ImageOptions.Progress).
func (v *View) Update(p convert.Progress) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.layers[p.Source]; !ok {
		v.order = append(v.order, p.Source)
		v.start[p.Source] = time.Now()
	}
	v.layers[p.Source] = p
	switch p.Stage {
	case convert.StageDone, convert.StagePassed, convert.StageFailed, convert.StageInterrupted:
		if _, ok := v.end[p.Source]; !ok {
			v.end[p.Source] = time.Now()
		}
	}
}

// Close draws the final state and stops redrawing; later calls do nothing,
// so it can be both deferred and called before the summary is printed.
func (v *View) Close() {
	v.once.Do(func() {
		close(v.stop)
		<-v.done
	})
}

func (v *View) clear() {
	if v.drawn > 0 {
		fmt.Fprintf(v.w, "\x1b[%dA", v.drawn)
	}
}

func (v *View) draw() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.clear()
	var b strings.Builder
	for _, src := range v.order {
		p := v.layers[src]
		b.WriteString("\x1b[2K")
		end, ok := v.end[src]
		if !ok {
			end = time.Now()
		}
		b.WriteString(progressLine(p, v.width, end.Sub(v.start[src])))
		b.WriteByte('\n')
	}
	io.WriteString(v.w, b.String())
	v.drawn = len(v.order)
}

// progressLine renders one layer: "sha256:0123abcd… converting [=====>    ] 12.0/45.1 MB".
func progressLine(p convert.Progress, width int, elapsed time.Duration) string {
	name := layerName(p.Source)
	frac := 0.0
	if p.Total > 0 {
		frac = float64(p.Read) / float64(p.Total)
	}
	switch p.Stage {
	case convert.StageDone, convert.StagePassed:
		frac = 1
	}
	frac = min(max(frac, 0), 1)
	fill := int(frac * float64(width))
	bar := strings.Repeat("=", fill) + strings.Repeat(" ", width-fill)
	if fill > 0 && fill < width {
		bar = bar[:fill-1] + ">" + bar[fill:]
	}
	stage := string(p.Stage)
	if p.Stage == convert.StageWaiting {
		stage = "waiting for a job" // all of --jobs are busy
	}
	return fmt.Sprintf("%-19s %-17s [%s] %s/%s %5.1fs", name, stage, bar, HumanSize(p.Read), HumanSize(p.Total), elapsed.Seconds())
}

// layerName is a layer's digest cut to "sha256:" and 12 hex digits, or
// "N layers" for the digests of a flattened image (a comma list).
func layerName(source string) string {
	if i := strings.IndexByte(source, ','); i >= 0 {
		return fmt.Sprintf("%d layers", strings.Count(source, ",")+1)
	}
	return source[:min(len(source), 19)]
}

// HumanSize writes n bytes as docker does: decimal units, three
// significant digits ("512B", "12.3kB", "1.46GB").
func HumanSize(n int64) string {
	f := float64(n)
	units := []string{"B", "kB", "MB", "GB", "TB", "PB"}
	i := 0
	for f >= 1000 && i < len(units)-1 {
		f /= 1000
		i++
	}
	return strconv.FormatFloat(f, 'g', 3, 64) + units[i]
}

// Every logs, through log, how far each layer that is converting has got,
// at most once per interval per layer: off a terminal, where no bars are
// drawn, a big layer would otherwise say nothing for minutes.
func Every(interval time.Duration, log func(string)) func(convert.Progress) {
	var mu sync.Mutex
	last := map[string]time.Time{}
	return func(p convert.Progress) {
		if p.Stage != convert.StageConverting {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		now := time.Now()
		t, seen := last[p.Source]
		if !seen {
			last[p.Source] = now // the start is logged already
			return
		}
		if now.Sub(t) < interval {
			return
		}
		last[p.Source] = now
		log(fmt.Sprintf("layer %s: converting, %s of %s read", layerName(p.Source), HumanSize(p.Read), HumanSize(p.Total)))
	}
}
