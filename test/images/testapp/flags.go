package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// config is the parsed command line.
type config struct {
	httpAddr     string
	tcpAddr      string
	grpcAddr     string
	grpcServices []string

	healthy      bool
	healthyAfter time.Duration

	writes   []fileWrite
	printEnv bool
	logs     []string

	sleep    time.Duration
	exitCode int

	signals      bool
	termDelay    time.Duration
	termExitCode int
	ignoreTerm   bool
}

type fileWrite struct{ path, content string }

// longRunning reports whether the process should stay up until killed.
func (c *config) longRunning() bool {
	return c.httpAddr != "" || c.tcpAddr != "" || c.grpcAddr != "" || c.signals || c.ignoreTerm
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// writeList is the repeatable --write=PATH=CONTENT flag.
type writeList []fileWrite

func (l *writeList) String() string { return fmt.Sprint(len(*l), " files") }
func (l *writeList) Set(v string) error {
	path, content, ok := strings.Cut(v, "=")
	if !ok || path == "" {
		return errors.New("want PATH=CONTENT")
	}
	*l = append(*l, fileWrite{path, content})
	return nil
}

// defaultArgs is what a bare run (no arguments) means.
var defaultArgs = []string{"--http=:8080", "--tcp=:8081", "--grpc=:8082"}

func parseFlags(args []string) (*config, error) {
	if len(args) == 0 {
		args = defaultArgs
	}
	c := &config{}
	fs := flag.NewFlagSet("testapp", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned; main prints them once
	fs.StringVar(&c.httpAddr, "http", "", "HTTP listen address")
	fs.StringVar(&c.tcpAddr, "tcp", "", "raw TCP listen address")
	fs.StringVar(&c.grpcAddr, "grpc", "", "gRPC health listen address")
	fs.Var((*stringList)(&c.grpcServices), "grpc-service", "extra gRPC health service name (repeatable)")
	fs.BoolVar(&c.healthy, "healthy", true, "start healthy")
	fs.DurationVar(&c.healthyAfter, "healthy-after", 0, "healthy only after this long from start")
	fs.Var((*writeList)(&c.writes), "write", "PATH=CONTENT to write at start (repeatable)")
	fs.BoolVar(&c.printEnv, "print-env", false, "print the sorted environment at start")
	fs.Var((*stringList)(&c.logs), "log", "line to print at start (repeatable)")
	fs.DurationVar(&c.sleep, "sleep", 0, "exit after this long")
	fs.IntVar(&c.exitCode, "exit-code", 0, "exit code when finishing on its own")
	fs.BoolVar(&c.signals, "signals", false, "log every received signal")
	fs.DurationVar(&c.termDelay, "term-delay", 0, "delay between a terminating signal and exit")
	fs.IntVar(&c.termExitCode, "term-exit-code", 0, "exit code after a terminating signal")
	fs.BoolVar(&c.ignoreTerm, "ignore-term", false, "do not exit on SIGTERM")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.sleep < 0 || c.healthyAfter < 0 || c.termDelay < 0 {
		return nil, errors.New("durations must not be negative")
	}
	return c, nil
}
