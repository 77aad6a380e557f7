package main

import (
	"reflect"
	"testing"
	"time"
)

func TestParseFlagsDefaultsWithoutArgs(t *testing.T) {
	c, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.httpAddr != ":8080" || c.tcpAddr != ":8081" || c.grpcAddr != ":8082" {
		t.Errorf("bare run serves %q %q %q", c.httpAddr, c.tcpAddr, c.grpcAddr)
	}
	if !c.healthy || !c.longRunning() {
		t.Errorf("bare run: healthy=%v longRunning=%v", c.healthy, c.longRunning())
	}
}

func TestParseFlagsComposes(t *testing.T) {
	c, err := parseFlags([]string{
		"--http=:9000", "--grpc-service=a", "--grpc-service", "b",
		"--healthy=false", "--healthy-after=2s",
		"--write=/tmp/x/y=a=b", "--write=/tmp/z=", "--print-env", "--log=hello", "--log", "world",
		"--sleep=1500ms", "--exit-code=3",
		"--signals", "--term-delay=1s", "--term-exit-code=7", "--ignore-term",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &config{
		httpAddr: ":9000", grpcServices: []string{"a", "b"},
		healthy: false, healthyAfter: 2 * time.Second,
		writes:   []fileWrite{{"/tmp/x/y", "a=b"}, {"/tmp/z", ""}},
		printEnv: true, logs: []string{"hello", "world"},
		sleep: 1500 * time.Millisecond, exitCode: 3,
		signals: true, termDelay: time.Second, termExitCode: 7, ignoreTerm: true,
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
}

func TestParseFlagsOnlyExitCodeIsShortLived(t *testing.T) {
	c, err := parseFlags([]string{"--exit-code=4"})
	if err != nil {
		t.Fatal(err)
	}
	if c.longRunning() || c.exitCode != 4 || c.httpAddr != "" {
		t.Errorf("got %+v", c)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--write=nocontent"},
		{"--write==x"},
		{"--sleep=abc"},
		{"--sleep=-1s"},
		{"--exit-code=x"},
		{"--nope"},
		{"--http=:1", "stray"},
	} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("parseFlags(%q) succeeded", args)
		}
	}
}
