package convert

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ocierofs/ocierofs/convert/internal/outfile"
)

// TestSweepTemp: a temp directory whose lock nobody holds is removed by the
// next makeTemp at once when its lock file was linked in locked
// (.ocierofs-held), after a minute when it was made, then locked
// (.ocierofs-lock: it may be one whose maker is about to lock it); one
// locked, or without a lock file, is kept.
func TestSweepTemp(t *testing.T) {
	parent := t.TempDir()
	if f, unnamed, err := outfile.CreateUnnamed(parent, "probe"); err != nil || !unnamed {
		t.Skipf("%s has no unnamed files (O_TMPFILE) or /proc: lock files are made, then locked", parent)
	} else {
		f.Close()
	}
	live, liveLock, err := makeTemp(parent)
	if err != nil {
		t.Fatal(err)
	}
	defer liveLock.Close()
	if _, err := os.Stat(filepath.Join(live, tempHeld)); err != nil {
		t.Fatalf("the lock file is not linked in: %v", err)
	}
	dead, deadLock, err := makeTemp(parent)
	if err != nil {
		t.Fatal(err)
	}
	deadLock.Close() // its process is gone
	mk := func(name, lock string, age time.Duration) string {
		d := filepath.Join(parent, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if lock != "" {
			p := filepath.Join(d, lock)
			os.WriteFile(p, nil, 0o600)
			at := time.Now().Add(-age)
			os.Chtimes(p, at, at)
		}
		return d
	}
	young := mk("ocierofs-young", tempLock, 0)
	old := mk("ocierofs-old", tempLock, time.Hour)
	foreign := mk("ocierofs-nolock", "", time.Hour)
	// Planted by another user of a shared $TMPDIR: a lock file that is a
	// symbolic link (to a file root would otherwise open read-write and
	// lock), and a directory of another owner.
	planted := mk("ocierofs-planted", "", 0)
	victim := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(victim, nil, 0o600)
	if err := os.Symlink(victim, filepath.Join(planted, tempHeld)); err != nil {
		t.Fatal(err)
	}
	others := mk("ocierofs-others", tempHeld, 0)
	owned := os.Geteuid() == 0
	if owned {
		if err := os.Chown(others, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	_, next, err := makeTemp(parent)
	if err != nil {
		t.Fatal(err)
	}
	next.Close()
	keep := map[string]bool{live: true, dead: false, young: true, old: false, foreign: true, planted: true}
	if owned {
		keep[others] = true
	}
	for d, want := range keep {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s: there %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
}
