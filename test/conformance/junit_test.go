package main

import (
	"strings"
	"testing"
)

// A trimmed report as the e2e framework writes it (--report-dir).
const sampleJUnit = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" disabled="0" errors="0" failures="2" time="100">
  <testsuite name="Kubernetes e2e suite" package="/x" tests="6" disabled="0" skipped="1" errors="0" failures="2" time="100">
    <testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1.5"></testcase>
    <testcase name="[It] [sig-node] A passes [NodeConformance]" classname="Kubernetes e2e suite" status="passed" time="10"></testcase>
    <testcase name="[It] [sig-node] B fails [NodeConformance]" classname="Kubernetes e2e suite" status="failed" time="20">
      <failure message="" type="failed">[FAILED] Timed out after 300s.&#xA;pod never ran&#xA;In [It] at: x.go:1</failure>
    </testcase>
    <testcase name="[It] [sig-node] C known [NodeConformance]" classname="Kubernetes e2e suite" status="timedout" time="30">
      <failure message="" type="timedout">[TIMEDOUT] A suite timeout occurred</failure>
    </testcase>
    <testcase name="[It] [sig-node] D was known [NodeConformance]" classname="Kubernetes e2e suite" status="passed" time="5"></testcase>
    <testcase name="[It] [sig-node] E skips itself" classname="Kubernetes e2e suite" status="skipped" time="0.1">
      <skipped message="skipped - Only supported for providers [gce]"></skipped>
    </testcase>
    <testcase name="[It] [sig-apps] not selected" classname="Kubernetes e2e suite" status="skipped" time="0">
      <skipped message="skipped"></skipped>
    </testcase>
  </testsuite>
</testsuites>`

func TestSummarize(t *testing.T) {
	results, err := parseJUnit(strings.NewReader(sampleJUnit))
	if err != nil {
		t.Fatal(err)
	}
	run := []string{
		"[sig-node] A passes [NodeConformance]", "[sig-node] B fails [NodeConformance]",
		"[sig-node] C known [NodeConformance]", "[sig-node] D was known [NodeConformance]",
		"[sig-node] E skips itself", "[sig-node] F never ran",
	}
	known := knownFailures{"[sig-node] C known [NodeConformance]": "hostlet lacks C", "[sig-node] D was known [NodeConformance]": "was broken"}
	s := summarize(results, run, known)
	if len(s.passed) != 2 || len(s.failed) != 2 || len(s.skipped) != 1 {
		t.Errorf("passed %d failed %d skipped %d, want 2 2 1", len(s.passed), len(s.failed), len(s.skipped))
	}
	if len(s.newFailures) != 1 || s.newFailures[0].name != "[sig-node] B fails [NodeConformance]" {
		t.Errorf("new failures = %v", s.newFailures)
	}
	if strings.Join(s.fixed, "|") != "[sig-node] D was known [NodeConformance]" {
		t.Errorf("fixed = %v", s.fixed)
	}
	if strings.Join(s.missing, "|") != "[sig-node] F never ran" {
		t.Errorf("missing = %v", s.missing)
	}
	if s.ok() {
		t.Error("ok with a new failure")
	}
	var out strings.Builder
	s.print(&out, known)
	for _, want := range []string{
		"passed 2, failed 2 (1 known, 1 new), skipped 1, missing 1",
		"NEW   [sig-node] B fails [NodeConformance] (20s)\n        [FAILED] Timed out after 300s.",
		"known [sig-node] C known [NodeConformance] (30s)\n        [TIMEDOUT] A suite timeout occurred\n        known: hostlet lacks C",
		"[sig-node] E skips itself: skipped - Only supported for providers [gce]",
		"now PASS (remove them from known-failures.txt):\n  [sig-node] D was known",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}

	// Only known failures: ok.
	s = summarize(results, run[2:5], known)
	if !s.ok() {
		t.Errorf("not ok with only known failures: %+v", s)
	}
}

// A run in two parts (core, network): each part's report lists the other's
// tests as skipped, and the part that ran a test decides its result,
// whichever report comes last.
func TestSummarizeParts(t *testing.T) {
	const a, b = "[sig-node] A [NodeConformance]", "[sig-network] B [Conformance]"
	core := []result{{name: a, state: "failed"}, {name: b, state: "skipped"}}
	network := []result{{name: a, state: "skipped"}, {name: b, state: "passed"}}
	for _, results := range [][]result{append(core, network...), append(network, core...)} {
		s := summarize(results, []string{a, b}, nil)
		if len(s.failed) != 1 || s.failed[0].name != a || len(s.passed) != 1 || s.passed[0].name != b || len(s.skipped) != 0 {
			t.Errorf("failed %v passed %v skipped %v; want %s failed and %s passed", s.failed, s.passed, s.skipped, a, b)
		}
		if s.ok() {
			t.Error("ok with a core failure")
		}
	}
}

func TestSuiteFailureFailsTheRun(t *testing.T) {
	report := strings.Replace(sampleJUnit, `name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="passed" time="1.5"></testcase>`,
		`name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" status="failed" time="1.5"><failure type="failed">no nodes</failure></testcase>`, 1)
	results, err := parseJUnit(strings.NewReader(report))
	if err != nil {
		t.Fatal(err)
	}
	s := summarize(results, []string{"[sig-node] A passes [NodeConformance]"}, nil)
	if s.ok() || len(s.suiteFailures) != 1 || firstLine(s.suiteFailures[0].message) != "no nodes" {
		t.Errorf("suite failure not reported: %+v", s)
	}
}
