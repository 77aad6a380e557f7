package csihostdir

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Block volumes (volumeMode: Block) are files under the state dir with a
// loop device over them, attached at NodeStage (or NodePublish without
// staging) and detached at NodeUnstage (NodeUnpublish), published as the
// device node bind-mounted on the target file, as csi-driver-host-path
// publishes its block volumes.

// DefaultBlockSize is a block volume's size when nothing says otherwise
// (CreateVolume's capacity, or the volume context's "size" in bytes).
const DefaultBlockSize = 16 << 20

// loopDevice is the loop device over the volume's file, attached (and the
// file made, of the volume context's "size") if need be.
func (d *Driver) loopDevice(id string, volCtx map[string]string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	file := BlockFile(d.cfg.StateDir, id)
	if dev, err := loopOf(file); err != nil || dev != "" {
		return dev, err
	}
	if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
		size := int64(DefaultBlockSize)
		if s, ok := volCtx["size"]; ok {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n <= 0 {
				return "", status.Errorf(codes.InvalidArgument, "bad size %q", s)
			}
			size = n
		}
		if err := makeBlockFile(file, size); err != nil {
			return "", err
		}
	}
	out, err := exec.Command("losetup", "-f", "--show", file).CombinedOutput()
	if err != nil {
		return "", status.Errorf(codes.Internal, "losetup %s: %v %s", file, err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// makeBlockFile makes a block volume's file of size bytes (sparse).
func makeBlockFile(file string, size int64) error {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Truncate(size)
}

// loopOf is the loop device attached to file, "" if none.
func loopOf(file string) (string, error) {
	if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	out, err := exec.Command("losetup", "-j", file).CombinedOutput()
	if err != nil {
		return "", status.Errorf(codes.Internal, "losetup -j %s: %v %s", file, err, out)
	}
	// "/dev/loop3: [2049]:1234 (/path/file)"
	dev, _, ok := strings.Cut(strings.TrimSpace(string(out)), ":")
	if !ok {
		return "", nil
	}
	return dev, nil
}

// detachLoops detaches every loop device over file (none: no error).
func detachLoops(file string) error {
	for range 8 {
		dev, err := loopOf(file)
		if err != nil || dev == "" {
			return err
		}
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			return status.Errorf(codes.Internal, "losetup -d %s: %v %s", dev, err, out)
		}
	}
	return status.Errorf(codes.Internal, "loop devices over %s not detached", file)
}

// bindDevice bind-mounts the device node dev on target, a file it makes,
// unless target is a mount point already.
func bindDevice(dev, target string) error {
	if mounted(target) {
		return nil
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	f.Close()
	if err := unix.Mount(dev, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", dev, target, err)
	}
	return nil
}

// refreshLoop makes the loop device over a block volume's file, if any,
// take the file's size (losetup -c), as after ControllerExpandVolume.
func (d *Driver) refreshLoop(id string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	dev, err := loopOf(BlockFile(d.cfg.StateDir, id))
	if err != nil || dev == "" {
		return err
	}
	if out, err := exec.Command("losetup", "-c", dev).CombinedOutput(); err != nil {
		return status.Errorf(codes.Internal, "losetup -c %s: %v %s", dev, err, out)
	}
	return nil
}
