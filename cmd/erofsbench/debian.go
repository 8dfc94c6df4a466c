package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// debianSuite is the release the debian dataset is bootstrapped from.
const debianSuite = "bookworm"

// skipError marks a dataset that cannot be made on this machine (no
// network, no debootstrap): the suite goes on without it and says why.
type skipError struct{ reason string }

func (e *skipError) Error() string { return e.reason }

// makeDebian bootstraps a minimal Debian root filesystem (debootstrap
// --variant=minbase) into root/debian. Its bytes depend on the day the
// mirror was read, so it is made once and kept; the tar of it has fixed
// mtimes like the other datasets. The tree keeps its real modes, symlinks,
// hard links and the device nodes debootstrap makes in /dev.
func (g *generator) makeDebian() error {
	deb, err := exec.LookPath("debootstrap")
	if err != nil {
		deb, err = installDebootstrap(g.logf)
		if err != nil {
			return &skipError{"no debootstrap (" + err.Error() + "); install it with apt-get install debootstrap"}
		}
	}
	if err := probeMirror(g.mirror); err != nil {
		return &skipError{fmt.Sprintf("Debian mirror %s unreachable: %v", g.mirror, err)}
	}
	dir := filepath.Join(g.root, "debian")
	tmp := dir + ".tmp"
	if err := unmountUnder(tmp); err != nil {
		return err
	}
	os.RemoveAll(dir)
	os.RemoveAll(tmp)
	g.logf("debootstrap --variant=minbase %s %s %s (a few minutes)", debianSuite, tmp, g.mirror)
	cmd := exec.Command(deb, "--variant=minbase", debianSuite, tmp, g.mirror)
	logPath := filepath.Join(g.root, ".stamp", "debian.debootstrap.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	err = cmd.Run()
	logf.Close()
	// debootstrap mounts /proc and /sys in the target while it works; a
	// failed run can leave them behind, and RemoveAll must not walk into them.
	if uerr := unmountUnder(tmp); uerr != nil && err == nil {
		err = uerr
	}
	if err != nil {
		return &skipError{fmt.Sprintf("debootstrap failed (%v): %s; log in %s", err, lastLine(logPath), logPath)}
	}
	src := fmt.Sprintf("debootstrap --variant=minbase %s %s, %s", debianSuite, g.mirror, time.Now().UTC().Format("2006-01-02"))
	if err := os.WriteFile(filepath.Join(g.root, ".stamp", "debian.source"), []byte(src+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// installDebootstrap runs apt-get install debootstrap, as the suite's
// instructions say to, when running as root on a Debian-like system.
func installDebootstrap(logf func(string, ...any)) (string, error) {
	apt, err := exec.LookPath("apt-get")
	if err != nil || os.Geteuid() != 0 {
		return "", errors.New("not found, and apt-get cannot install it here")
	}
	logf("installing debootstrap: apt-get install -y debootstrap")
	out, err := exec.Command(apt, "install", "-y", "debootstrap").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("apt-get install debootstrap: %v: %s", err, firstLine(out, err))
	}
	return exec.LookPath("debootstrap")
}

// probeMirror fetches the release file, so that an offline machine skips
// the dataset in seconds rather than after debootstrap's retries.
func probeMirror(mirror string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, strings.TrimSuffix(mirror, "/")+"/dists/"+debianSuite+"/Release", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %s", resp.Status)
	}
	return nil
}

// unmountUnder unmounts everything mounted at or below dir, deepest first.
func unmountUnder(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil // no procfs: nothing we can see to unmount
	}
	defer f.Close()
	var mps []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			mp := fields[4]
			if mp == dir || strings.HasPrefix(mp, dir+"/") {
				mps = append(mps, mp)
			}
		}
	}
	for i := len(mps) - 1; i >= 0; i-- {
		if out, err := exec.Command("umount", "-l", mps[i]).CombinedOutput(); err != nil {
			return fmt.Errorf("umount %s: %v: %s", mps[i], err, firstLine(out, err))
		}
	}
	return nil
}

// lastLine is the last non-empty line of a file (debootstrap puts the
// reason for a failure there).
func lastLine(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
