package main

import (
	"errors"
	"fmt"
	"net"
	"os"
)

// serveTCP answers every connection with "ok\n" and closes it: enough for
// TCP socket probes and plain connectivity checks.
func serveTCP(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				fmt.Fprintln(os.Stderr, "testapp: tcp:", err)
				continue
			}
			logf("tcp: connection from %s", c.RemoteAddr())
			c.Write([]byte("ok\n"))
			c.Close()
		}
	}()
	return nil
}
