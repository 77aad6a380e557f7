package main

import (
	"testing"
	"time"
)

// The command lines of the e2e sources parse as netcat-openbsd reads them.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		args []string
		want options
	}{
		{[]string{"-v", "-t", "-w", "2", "svc", "80"}, options{verbose: true, wait: 2 * time.Second, host: "svc", port: "80"}},
		{[]string{"-v", "-u", "-w", "2", "10.0.0.1", "53"}, options{verbose: true, udp: true, wait: 2 * time.Second, host: "10.0.0.1", port: "53"}},
		{[]string{"-u", "-w5", "-p", "12345", "h", "9"}, options{udp: true, wait: 5 * time.Second, srcPort: 12345, host: "h", port: "9"}},
		{[]string{"-vz", "h", "1"}, options{verbose: true, zero: true, host: "h", port: "1"}},
		// host_path_type.go's socket on the node.
		{[]string{"-lU", "/mnt/test/asocket"}, options{unix: true, listen: true, path: "/mnt/test/asocket"}},
		{[]string{"-U", "/s"}, options{unix: true, path: "/s"}},
	} {
		got, err := parse(c.args)
		if err != nil || got != c.want {
			t.Errorf("parse(%q) = %+v, %v; want %+v", c.args, got, err, c.want)
		}
	}
	for _, bad := range [][]string{{"-l", "80"}, {"-lU"}, {"-U", "a", "b"}, {"h"}, {"-w", "x", "h", "1"}, {"-w"}} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q): no error", bad)
		}
	}
}
