package roundtrip

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

var mountProbe struct {
	once   sync.Once
	reason string // why mounting is impossible; "" if it works
}

// ShortMount is why a test that mounts skips under go test -short: the
// fast tier needs no root and no kernel module, as root or not.
const ShortMount = "-short: no kernel mounts; make test runs them"

// NoMount says why this machine cannot loop-mount EROFS images, "" if it
// can: root, erofs in the kernel (after modprobe erofs), and a loop device
// that attaches. Whether the kernel then accepts an image is what the
// tests check, so it is not probed. Under -short it is ShortMount.
func NoMount() string {
	if testing.Short() {
		return ShortMount
	}
	mountProbe.once.Do(func() { mountProbe.reason = probeMount() })
	return mountProbe.reason
}

// RequireMount skips the test, with one line saying why (NoMount), unless
// this machine can loop-mount EROFS images.
func RequireMount(t testing.TB) {
	t.Helper()
	if why := NoMount(); why != "" {
		t.Skip(why)
	}
}

func kernelHasErofs() bool {
	b, err := os.ReadFile("/proc/filesystems")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[len(f)-1] == "erofs" {
			return true
		}
	}
	return false
}

func probeMount() string {
	if runtime.GOOS != "linux" {
		return "cannot mount EROFS images: mounting them needs Linux"
	}
	if os.Geteuid() != 0 {
		return "cannot mount EROFS images: not root"
	}
	if !kernelHasErofs() {
		exec.Command("modprobe", "erofs").Run()
		if !kernelHasErofs() {
			return "cannot mount EROFS images: no erofs in /proc/filesystems, even after modprobe erofs"
		}
	}
	for _, c := range []string{"mount", "umount", "losetup"} {
		if _, err := exec.LookPath(c); err != nil {
			return "cannot mount EROFS images: no " + c + " command"
		}
	}
	f, err := os.CreateTemp("", "roundtrip-loop-probe-")
	if err != nil {
		return "cannot mount EROFS images: " + err.Error()
	}
	defer os.Remove(f.Name())
	f.Truncate(1 << 20)
	f.Close()
	out, err := exec.Command("losetup", "--find", "--show", "--read-only", f.Name()).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("cannot mount EROFS images: no loop device attaches (losetup: %v: %s)", err, bytes.TrimSpace(out))
	}
	exec.Command("losetup", "-d", strings.TrimSpace(string(out))).Run()
	return ""
}

// KernelLog returns the last erofs lines of the kernel log, to explain a
// refused mount.
func KernelLog() string {
	out, _ := exec.Command("dmesg").Output()
	var ls []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(strings.ToLower(l), "erofs") {
			ls = append(ls, l)
		}
	}
	if len(ls) > 8 {
		ls = ls[len(ls)-8:]
	}
	return strings.Join(ls, "\n")
}

// Mount mounts img read-only (mount -t erofs -o loop,ro) on a fresh
// directory and unmounts it when the test ends. Extra devices (blobs, the
// tar of a tar index) are given as files: each goes on a read-only loop
// device of its own, as the kernel opens device= as a block device. A
// refused mount fails the test, with the kernel's erofs messages; a
// machine that cannot mount (NoMount) skips it.
func Mount(t testing.TB, img string, devices ...string) string {
	t.Helper()
	RequireMount(t)
	mnt := t.TempDir()
	o := "loop,ro"
	for _, d := range devices {
		out, err := exec.Command("losetup", "--find", "--show", "--read-only", d).Output()
		if err != nil {
			t.Fatalf("losetup %s: %v", d, err)
		}
		loop := string(bytes.TrimSpace(out))
		t.Cleanup(func() { exec.Command("losetup", "-d", loop).Run() })
		o += ",device=" + loop
	}
	out, err := exec.Command("mount", "-t", "erofs", "-o", o, img, mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("mount -t erofs -o %s %s: %v: %s\nkernel log:\n%s", o, img, err, bytes.TrimSpace(out), KernelLog())
	}
	// Registered after TempDir's cleanup, so it runs first.
	t.Cleanup(func() { Unmount(t, mnt) })
	return mnt
}

// Unmount unmounts mnt, retrying while it is busy, and detaches it lazily
// as a last resort.
func Unmount(t testing.TB, mnt string) {
	var out []byte
	var err error
	for i := 0; i < 10; i++ {
		if out, err = exec.Command("umount", mnt).CombinedOutput(); err == nil {
			return
		}
		time.Sleep(time.Duration(i+1) * 50 * time.Millisecond)
	}
	t.Logf("umount %s: %v: %s; detaching lazily", mnt, err, bytes.TrimSpace(out))
	if out, err := exec.Command("umount", "-l", mnt).CombinedOutput(); err != nil {
		t.Errorf("umount -l %s: %v: %s", mnt, err, bytes.TrimSpace(out))
	}
}

// WorkDir returns a fresh directory for corpora, references and images,
// removed when the test ends. It is on /dev/shm when that is a tmpfs with
// room and with user and trusted xattrs (Linux 6.6+): creating and
// deleting thousands of files and many images on a disk filesystem
// mounted with discard is slow, on tmpfs fast.
// Otherwise it is t.TempDir().
func WorkDir(t testing.TB) string {
	t.Helper()
	shmProbe.once.Do(func() { shmProbe.ok = probeShm() })
	if !shmProbe.ok {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "roundtrip-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	return dir
}

var shmProbe struct {
	once sync.Once
	ok   bool
}
