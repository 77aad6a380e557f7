// Command nc is the small static stand-in for netcat in the conformance
// agnhost image: upstream agnhost is Alpine-based with netcat-openbsd, and
// the e2e Service tests run `echo hostName | nc -v -t -w 2 HOST PORT` (and
// -u) in it; busybox's nc knows neither -v, -t nor -u. Client mode only:
//
//	nc [-vtunz] [-w SECONDS] [-p SRCPORT] HOST PORT
//
// stdin goes to the connection, what comes back to stdout, until the peer
// closes or (with -w) nothing arrives for that long. -v says on stderr
// that the connection succeeded, as netcat-openbsd does. Exit code 1 when
// the connection cannot be made.
//
//	nc -U PATH, nc -lU PATH
//
// the same over a unix socket, or listening on one for a single
// connection: the HostPathType specs keep `nc -lU` running in agnhost so
// that a socket exists on the node.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"
)

type options struct {
	verbose, udp, zero bool
	unix, listen       bool
	wait               time.Duration
	srcPort            int
	host, port         string
	path               string // -U
}

func main() {
	o, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "nc:", err)
		os.Exit(1)
	}
	os.Exit(run(o))
}

func parse(args []string) (options, error) {
	var o options
	var pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		for j := 1; j < len(a); j++ {
			switch c := a[j]; c {
			case 'v':
				o.verbose = true
			case 't', 'n':
			case 'u':
				o.udp = true
			case 'z':
				o.zero = true
			case 'U':
				o.unix = true
			case 'l':
				o.listen = true
			case 'w', 'p':
				v := a[j+1:]
				if v == "" {
					if i+1 >= len(args) {
						return o, fmt.Errorf("option -%c requires an argument", c)
					}
					i++
					v = args[i]
				}
				n, err := strconv.Atoi(v)
				if err != nil {
					return o, fmt.Errorf("option -%c: %q is not a number", c, v)
				}
				if c == 'w' {
					o.wait = time.Duration(n) * time.Second
				} else {
					o.srcPort = n
				}
				j = len(a)
			default:
				return o, fmt.Errorf("invalid option -- '%c'", c)
			}
		}
	}
	if o.unix {
		if len(pos) != 1 {
			return o, errors.New("usage: nc -U [-l] PATH")
		}
		o.path = pos[0]
		return o, nil
	}
	if o.listen {
		return o, errors.New("-l: only a unix socket (-U PATH) can listen")
	}
	if len(pos) != 2 {
		return o, errors.New("usage: nc [-vtunz] [-w SECONDS] [-p SRCPORT] HOST PORT")
	}
	o.host, o.port = pos[0], pos[1]
	return o, nil
}

func run(o options) int {
	if o.unix {
		var conn net.Conn
		if o.listen {
			ln, err := net.Listen("unix", o.path)
			if err != nil {
				fmt.Fprintln(os.Stderr, "nc:", err)
				return 1
			}
			defer ln.Close()
			if conn, err = ln.Accept(); err != nil {
				fmt.Fprintln(os.Stderr, "nc:", err)
				return 1
			}
		} else {
			var err error
			if conn, err = net.Dial("unix", o.path); err != nil {
				fmt.Fprintln(os.Stderr, "nc:", err)
				return 1
			}
		}
		defer conn.Close()
		return pipe(o, conn)
	}
	proto := "tcp"
	d := net.Dialer{Timeout: o.wait}
	if o.udp {
		proto = "udp"
		if o.srcPort != 0 {
			d.LocalAddr = &net.UDPAddr{Port: o.srcPort}
		}
	} else if o.srcPort != 0 {
		d.LocalAddr = &net.TCPAddr{Port: o.srcPort}
	}
	conn, err := d.Dial(proto, net.JoinHostPort(o.host, o.port))
	if err != nil {
		if o.verbose {
			fmt.Fprintf(os.Stderr, "nc: connect to %s port %s (%s) failed: %v\n", o.host, o.port, proto, err)
		}
		return 1
	}
	defer conn.Close()
	if o.verbose {
		fmt.Fprintf(os.Stderr, "Connection to %s %s port [%s/*] succeeded!\n", o.host, o.port, proto)
	}
	if o.zero {
		return 0
	}
	return pipe(o, conn)
}

// pipe copies stdin to conn and conn to stdout until the peer closes or,
// with -w, nothing arrives for that long.
func pipe(o options, conn net.Conn) int {
	go func() {
		// Each read of stdin is one write: one datagram with -u.
		buf := make([]byte, 64*1024)
		for {
			n, err := os.Stdin.Read(buf)
			if n > 0 {
				if _, werr := conn.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	buf := make([]byte, 64*1024)
	for {
		if o.wait > 0 {
			conn.SetReadDeadline(time.Now().Add(o.wait))
		}
		n, err := conn.Read(buf)
		if n > 0 {
			os.Stdout.Write(buf[:n])
		}
		if err != nil {
			var ne net.Error
			if err == io.EOF || (errors.As(err, &ne) && ne.Timeout()) {
				return 0
			}
			// A UDP peer with nothing listening answers ICMP: refused.
			return 1
		}
	}
}
