package runtime

import (
	cnins "github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// loopbackUp brings lo up in the network namespace at path, which is all
// the loopback CNI plugin's ADD does (the kernel gives lo its 127.0.0.1
// and ::1), as CRI runs it for every pod. Done in-process: a plugin process
// per pod ADD and DEL was a third of the CNI cost of a burst.
func loopbackUp(path string) error {
	return cnins.WithNetNSPath(path, func(cnins.NetNS) error {
		// A socket belongs to the namespace it is made in: the ioctls
		// act on that namespace's lo.
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ifr, err := unix.NewIfreq("lo")
		if err != nil {
			return err
		}
		if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
			return err
		}
		ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
		return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
	})
}
