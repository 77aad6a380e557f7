package node

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

func memTotal() (int64, error) {
	_, total, err := memAvailable()
	return total, err
}

// memAvailable reads MemAvailable and MemTotal from /proc/meminfo in bytes.
func memAvailable() (avail, total int64, err error) {
	info, err := meminfo()
	if err != nil {
		return 0, 0, err
	}
	if info["MemTotal"] == 0 {
		return 0, 0, fmt.Errorf("MemTotal not found in /proc/meminfo")
	}
	return int64(info["MemAvailable"]), int64(info["MemTotal"]), nil
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readInt(path string) int64 {
	v, _ := strconv.ParseInt(readTrim(path), 10, 64)
	return v
}

func osImage() string {
	f, err := os.Open("/etc/os-release")
	if err != nil {
		return "Linux"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "PRETTY_NAME="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return "Linux"
}

// DefaultIP is the IPv4 address of the interface holding the default
// route, the kubelet's choice when --node-ip is not given.
func DefaultIP() (string, error) {
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 || f[1] != "00000000" {
			continue
		}
		iface, err := net.InterfaceByName(f[0])
		if err != nil {
			continue
		}
		addrs, _ := iface.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", fmt.Errorf("no default route found; set --node-ip")
}
