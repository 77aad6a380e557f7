package main

import (
	"testing"
	"time"
)

// The housekeeping flags default and validate as the kubelet's.
func TestHousekeepingFlags(t *testing.T) {
	var o options
	if err := o.parse(nil); err != nil {
		t.Fatal(err)
	}
	r, err := o.logRotation()
	if err != nil || r.MaxSize != 10<<20 || r.MaxFiles != 5 || r.Workers != 1 || r.Interval != 10*time.Second {
		t.Fatalf("log rotation defaults %+v, %v", r, err)
	}
	if o.podLogsDir != "/var/log/pods" || o.containerLogsDir != "/var/log/containers" {
		t.Fatalf("log dirs %q %q", o.podLogsDir, o.containerLogsDir)
	}
	p, err := o.imageGC()
	if err != nil || p.HighThresholdPercent != 85 || p.LowThresholdPercent != 80 || p.MinAge != 2*time.Minute || p.MaxAge != 0 {
		t.Fatalf("image GC defaults %+v, %v", p, err)
	}
	if c := o.containerGCPolicy(); c.MaxPerPodContainer != 1 || c.MaxContainers != -1 || c.MinAge != 0 {
		t.Fatalf("container GC defaults %+v", c)
	}
	for _, args := range [][]string{
		{"--container-log-max-size", "ten"},
		{"--container-log-max-files", "1"},
		{"--container-log-max-workers", "0"},
		{"--container-log-monitor-interval", "2s"},
		{"--pod-logs-dir", "var/log/pods"},
		{"--pod-logs-dir", "/var/log/pods/"},
		{"--container-logs-dir", "/var/log/../containers"},
	} {
		// Refused when parsed (the kubelet's configuration validation) or
		// when used.
		o = options{}
		if err := o.parse(args); err != nil {
			continue
		}
		if _, err := o.logRotation(); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
	for _, args := range [][]string{
		{"--image-gc-high-threshold", "101"},
		{"--image-gc-low-threshold", "90"},
		{"--image-maximum-gc-age", "1m"},
	} {
		o = options{}
		if err := o.parse(args); err != nil {
			continue
		}
		if _, err := o.imageGC(); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
