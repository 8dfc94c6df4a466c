//go:build linux

// Package mount serves the EROFS layers of an image read-only through
// FUSE, one file system per layer, and stacks them with the kernel's
// overlayfs: the merged tree is the kernel's, by the same rules as when
// the layers are mounted as EROFS (whiteouts, opaque directories), and no
// stacking rule is written twice.
//
//	m, err := mount.Stack("/mnt/alpine", runDir, []mount.Layer{{Image: bottom, Name: "sha256:…"}, …}, mount.Options{})
//	…
//	m.Unmount()
//
// An image's data come from wherever its io.ReaderAt reads them: a file, or
// a lazy.Blob that fetches ranges from a registry.
package mount

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ocierofs/ocierofs/erofs"
)

// Layer is one layer to serve.
type Layer struct {
	Image *erofs.Image
	// Name is the FUSE file system's source in mountinfo (the layer's
	// digest, say).
	Name string
	// DataOnly makes it a data-only lower layer of the overlay (the EROFS
	// image spec's overlay-data role, Linux 6.5+): none of its tree shows,
	// and the metacopy files of the layers that do read their data from
	// the file their redirect names in it.
	DataOnly bool
}

// Options shape Stack.
type Options struct {
	// Log receives the errors that readers see as EIO.
	Log func(string)
	// Debug logs every FUSE request.
	Debug bool
	// Record, if set, is told the path of each file at its first opening
	// in a layer (the path inside the image, without a leading slash): the
	// order in which a workload reads, for a prefetch list.
	Record func(path string)
}

// Mount is a stack of layers mounted at Target.
type Mount struct {
	Target string
	// Base holds the layers' mount points, 0 (bottom) to N-1.
	Base    string
	points  []string
	servers []*fuse.Server

	mu      sync.Mutex
	stopped bool
}

// Available tells whether this process can mount FUSE file systems, and
// if not, why.
func Available() error {
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		hint := "load the fuse module (modprobe fuse)"
		if errors.Is(err, os.ErrPermission) {
			hint = "mount needs root, or access to /dev/fuse"
		} else if _, serr := os.Stat("/proc/filesystems"); serr == nil {
			if b, _ := os.ReadFile("/proc/filesystems"); strings.Contains(string(b), "\tfuse\n") {
				hint = "in a container, give it the device (docker run --device /dev/fuse --cap-add SYS_ADMIN)"
			}
		}
		return fmt.Errorf("FUSE is not available: %w (%s)", err, hint)
	}
	f.Close()
	return nil
}

// Stack mounts each layer (bottom first) as a FUSE file system at
// base/INDEX and the read-only overlay of them at target. On an error
// nothing stays mounted.
func Stack(target, base string, layers []Layer, opt Options) (m *Mount, err error) {
	if len(layers) == 0 {
		return nil, errors.New("mount: an image without layers")
	}
	if err := Available(); err != nil {
		return nil, err
	}
	m = &Mount{Target: target, Base: base}
	defer func() {
		if err != nil {
			m.stopLayers()
		}
	}()
	var lowers, data []string
	for i, l := range layers {
		dir := filepath.Join(base, strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		srv, err := serveLayer(dir, l, opt)
		if err != nil {
			return nil, fmt.Errorf("mount layer %d (%s): %w", i, l.Name, err)
		}
		m.points = append(m.points, dir)
		m.servers = append(m.servers, srv)
		if l.DataOnly {
			data = append(data, dir)
		} else {
			lowers = append(lowers, dir)
		}
	}
	if len(lowers) == 0 {
		return nil, errors.New("mount: only data-only layers: nothing to show")
	}
	if err := mountOverlay(target, lowers, data); err != nil {
		return nil, fmt.Errorf("mount overlay at %s: %w", target, err)
	}
	return m, nil
}

// serveLayer mounts one layer at dir and serves it.
func serveLayer(dir string, l Layer, opt Options) (*fuse.Server, error) {
	lf := &layerFS{img: l.Image, record: opt.Record, recorded: map[uint64]bool{}, fail: func(what string, err error) syscall.Errno {
		if opt.Log != nil {
			opt.Log(fmt.Sprintf("layer %s: %s: %v", l.Name, what, err))
		}
		return syscall.EIO
	}}
	root := &node{l: lf, ino: l.Image.Root()}
	// The image never changes: the kernel may keep names and attributes.
	forever := 24 * time.Hour
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther:  true,
			FsName:      l.Name,
			Name:        "ocierofs",
			DirectMount: true,
			// default_permissions: the kernel checks modes as
			// for any file system.
			Options:          []string{"default_permissions"},
			Debug:            opt.Debug,
			MaxReadAhead:     512 << 10,
			DirectMountFlags: unix.MS_RDONLY | unix.MS_NODEV | unix.MS_NOSUID,
			// Passthrough would make each layer count as a stacked file
			// system: with the overlay over the layers, a container's
			// overlay over that would pass the kernel's stacking depth
			// of two.
			DisabledCapabilities: fuse.CAP_PASSTHROUGH,
		},
		EntryTimeout:    &forever,
		AttrTimeout:     &forever,
		NegativeTimeout: &forever,
		NullPermissions: true,
		RootStableAttr:  &fs.StableAttr{Ino: ino(root.ino.Nid)},
	}
	return fs.Mount(dir, root, opts)
}

// mountOverlay mounts the read-only overlay of lowers (bottom first) and
// the data-only lower layers data at target: with the mount API's
// lowerdir+ and datadir+ (Linux 6.8+), which take any number of layers,
// else with one lowerdir option, which must fit a page. overlayfs wants
// two lowers without an upper: one layer without data layers is bound to
// target as it is, as containerd mounts a one-layer image.
func mountOverlay(target string, lowers, data []string) error {
	if len(lowers) == 1 && len(data) == 0 {
		if err := unix.Mount(lowers[0], target, "", unix.MS_BIND, ""); err != nil {
			return err
		}
		return unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, "")
	}
	fd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err == nil {
		defer unix.Close(fd)
		err = overlayConfig(fd, lowers, data)
		if err == nil {
			mfd, err := unix.Fsmount(fd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_RDONLY)
			if err != nil {
				return err
			}
			defer unix.Close(mfd)
			return unix.MoveMount(mfd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH)
		}
		if !errors.Is(err, unix.EINVAL) {
			return err
		}
	}
	var top []string
	for i := len(lowers) - 1; i >= 0; i-- {
		top = append(top, lowers[i])
	}
	opts := "lowerdir=" + strings.Join(top, ":")
	if len(data) > 0 {
		opts = dataOptions + ",lowerdir=" + strings.Join(top, ":") + "::" + strings.Join(data, "::")
	}
	return unix.Mount("ocierofs", target, "overlay", unix.MS_RDONLY, opts)
}

// dataOptions are the overlay options that data-only lower layers need:
// metacopy files, and their redirects followed.
const dataOptions = "metacopy=on,redirect_dir=follow"

func overlayConfig(fd int, lowers, data []string) error {
	if err := unix.FsconfigSetString(fd, "source", "ocierofs"); err != nil {
		return err
	}
	for i := len(lowers) - 1; i >= 0; i-- {
		if err := unix.FsconfigSetString(fd, "lowerdir+", lowers[i]); err != nil {
			return err
		}
	}
	if len(data) > 0 {
		for _, kv := range strings.Split(dataOptions, ",") {
			k, v, _ := strings.Cut(kv, "=")
			if err := unix.FsconfigSetString(fd, k, v); err != nil {
				return err
			}
		}
	}
	for _, d := range data {
		if err := unix.FsconfigSetString(fd, "datadir+", d); err != nil {
			return err
		}
	}
	return unix.FsconfigCreate(fd)
}

// Unmount unmounts the overlay, then the layers, and waits for their
// servers to stop. An overlay still in use is detached: it goes from the
// tree at once, and its open files fail from then on.
func (m *Mount) Unmount() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return nil
	}
	m.stopped = true
	var err error
	if uerr := unix.Unmount(m.Target, 0); uerr == unix.EBUSY {
		err = fmt.Errorf("%s was busy: detached it, its open files fail", m.Target)
		unix.Unmount(m.Target, unix.MNT_DETACH)
	} else if uerr != nil && uerr != unix.EINVAL {
		err = fmt.Errorf("unmount %s: %w", m.Target, uerr)
	}
	m.stopLayers()
	return err
}

// stopLayers unmounts every layer served and waits for its server.
func (m *Mount) stopLayers() {
	for i, srv := range m.servers {
		if srv.Unmount() != nil {
			unix.Unmount(m.points[i], unix.MNT_DETACH)
		}
	}
	for _, srv := range m.servers {
		srv.Wait()
	}
	for _, p := range m.points {
		os.Remove(p)
	}
}

// Wait returns when every layer's server has stopped.
func (m *Mount) Wait() {
	for _, srv := range m.servers {
		srv.Wait()
	}
}
