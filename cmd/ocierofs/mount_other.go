//go:build !linux

package main

import (
	"errors"

	"github.com/urfave/cli/v2"
)

// errMountLinux: a lazy mount stacks FUSE file systems with the kernel's
// overlayfs, which only Linux has.
var errMountLinux = errors.New("ocierofs mount needs Linux (FUSE layers stacked by overlayfs)")

var lazyMountCommand = &cli.Command{
	Name:      "mount",
	Usage:     "mount an EROFS image's merged root filesystem read-only (Linux only)",
	ArgsUsage: "IMAGE MOUNTPOINT",
	Action:    func(*cli.Context) error { return errMountLinux },
}

var lazyUmountCommand = &cli.Command{
	Name:      "umount",
	Usage:     "unmount what ocierofs mount mounted (Linux only)",
	ArgsUsage: "MOUNTPOINT",
	Action:    func(*cli.Context) error { return errMountLinux },
}
