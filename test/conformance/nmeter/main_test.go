package main

import (
	"testing"
	"time"
)

func TestRender(t *testing.T) {
	now := time.Date(2026, 12, 3, 9, 5, 7, 123456789, time.UTC)
	for format, want := range map[string]string{
		"%3t":      "09:05:07.123",
		"%t":       "09:05:07",
		"%6t":      "09:05:07.123456",
		"at %1t %": "at 09:05:07.1 %",
		"%c":       "%c",
	} {
		if got := render(format, now); got != want {
			t.Errorf("render(%q) = %q, want %q", format, got, want)
		}
	}
}

func TestParseArgs(t *testing.T) {
	d, f, err := parseArgs([]string{"-d0", "%3t"})
	if err != nil || d != 0 || f != "%3t" {
		t.Errorf("-d0 %%3t: %v %q %v", d, f, err)
	}
	d, _, err = parseArgs([]string{"-d", "250", "%t"})
	if err != nil || d != 250*time.Millisecond {
		t.Errorf("-d 250: %v %v", d, err)
	}
	if _, _, err := parseArgs([]string{"-dx", "%t"}); err == nil {
		t.Error("-dx accepted")
	}
}
