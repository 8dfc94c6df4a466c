package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/flate"
)

// cpuSpeed is how fast one CPU compresses, pinned: deflate level 6 of a
// fixed text-like buffer, the median of a few turns.
type cpuSpeed struct {
	CPU  int     `json:"cpu"`
	MBps float64 `json:"mb_per_s"`
}

// measureCPUSpeeds times the same compression on every CPU this process
// may run on, taking turns. The CPUs of a virtual machine need not be
// equally fast (a busy sibling thread on the host slows one down), and
// then N workers cannot be N times as fast as one worker pinned to the
// fastest: the bound is the sum of the speeds over the pinned one's.
func measureCPUSpeeds() ([]cpuSpeed, error) {
	cpus, err := allowedCPUs()
	if err != nil {
		return nil, err
	}
	in := calibrationInput(4 << 20)
	const turns = 5
	times := make([][]time.Duration, len(cpus))
	done := make(chan error)
	go func() {
		// One OS thread, moved from CPU to CPU; it is not given back to
		// the runtime's pool with a foreign affinity.
		runtime.LockOSThread()
		zw, err := flate.NewWriter(io.Discard, 6)
		if err != nil {
			done <- err
			return
		}
		for range turns {
			for i, c := range cpus {
				if err := pinThread(c); err != nil {
					done <- err
					return
				}
				runtime.Gosched()
				t := time.Now()
				zw.Reset(io.Discard)
				zw.Write(in)
				zw.Close()
				times[i] = append(times[i], time.Since(t))
			}
		}
		done <- nil
	}()
	if err := <-done; err != nil {
		return nil, err
	}
	out := make([]cpuSpeed, len(cpus))
	for i, c := range cpus {
		slices.Sort(times[i])
		out[i] = cpuSpeed{CPU: c, MBps: float64(len(in)) / 1e6 / times[i][turns/2].Seconds()}
	}
	return out, nil
}

// cpuSpeedsEnv makes erofsbench measure the CPU speeds, print them as JSON
// and exit. The measurement runs in a process of its own: a child started
// with vfork inherits its parent's peak RSS (the kernel records the old
// memory's high-water mark at exec), so erofsbench keeps its own peak
// below every build it measures.
const cpuSpeedsEnv = "EROFSBENCH_CPU_SPEEDS"

func cpuSpeedsMain() {
	s, err := measureCPUSpeeds()
	if err != nil {
		fmt.Fprintln(os.Stderr, "erofsbench:", err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(s)
}

// cpuSpeedsChild runs measureCPUSpeeds in a child erofsbench.
func cpuSpeedsChild() ([]cpuSpeed, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), cpuSpeedsEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	var s []cpuSpeed
	return s, json.Unmarshal(out, &s)
}

// calibrationInput is n bytes of words, the same every time.
func calibrationInput(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("the erofs image holds inodes directories extents pclusters and a superblock while the tar layer holds headers whiteouts and file data of a container image")
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(" \n"[rng.IntN(8)/7])
	}
	return b.Bytes()[:n]
}

// scalingBound is how much faster than one worker pinned to CPU pin all
// CPUs can be, at most, by their measured speeds; 0 if unknown.
func scalingBound(speeds []cpuSpeed, pin int) float64 {
	var sum, pinned float64
	for _, s := range speeds {
		sum += s.MBps
		if s.CPU == pin {
			pinned = s.MBps
		}
	}
	if pinned == 0 {
		return 0
	}
	return sum / pinned
}

// cpuSpeedLine describes the CPUs' speeds for the report.
func cpuSpeedLine(speeds []cpuSpeed, pin int) string {
	if len(speeds) == 0 {
		return ""
	}
	var parts []string
	for _, s := range speeds {
		parts = append(parts, fmt.Sprintf("CPU %d %.1f MB/s", s.CPU, s.MBps))
	}
	line := "CPU speeds (deflate level 6 of 4 MiB of text, pinned, median of 5): " + strings.Join(parts, ", ") + "."
	if b := scalingBound(speeds, pin); b > 0 && len(speeds) > 1 {
		line += fmt.Sprintf(" So all CPUs can be at most %.2f× as fast as one worker pinned to CPU %d.", b, pin)
	}
	return line + "\n"
}
