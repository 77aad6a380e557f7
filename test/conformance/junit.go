package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// junitSuites is the part of ginkgo's JUnit report the summary needs.
type junitSuites struct {
	Suites []struct {
		Cases []junitCase `xml:"testcase"`
	} `xml:"testsuite"`
}

type junitCase struct {
	Name    string  `xml:"name,attr"`
	Status  string  `xml:"status,attr"` // ginkgo's SpecState: passed, failed, skipped, timedout, ...
	Time    float64 `xml:"time,attr"`
	Skipped *struct {
		Message string `xml:"message,attr"`
	} `xml:"skipped"`
	Failure *junitText `xml:"failure"`
	Error   *junitText `xml:"error"`
}

type junitText struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// result is the outcome of one test (or suite node) of the run.
type result struct {
	name    string
	state   string // passed, failed, skipped, or ginkgo's timedout/interrupted/...
	time    time.Duration
	message string // failure text or skip reason
}

func (r result) notRun() bool { return r.state == "skipped" || r.state == "pending" }

func (r result) failed() bool {
	return r.state != "passed" && r.state != "skipped" && r.state != "pending"
}

func readJUnit(path string) ([]result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseJUnit(f)
}

// parseJUnit reads the report; "[It] NAME" cases become NAME, suite nodes
// keep their "[SynchronizedBeforeSuite]"-style names.
func parseJUnit(r io.Reader) ([]result, error) {
	var s junitSuites
	if err := xml.NewDecoder(r).Decode(&s); err != nil {
		return nil, fmt.Errorf("junit report: %w", err)
	}
	var out []result
	for _, suite := range s.Suites {
		for _, c := range suite.Cases {
			res := result{
				name:  strings.TrimPrefix(c.Name, "[It] "),
				state: c.Status,
				time:  time.Duration(c.Time * float64(time.Second)),
			}
			switch {
			case c.Failure != nil:
				res.message = firstNonEmpty(c.Failure.Message, c.Failure.Text)
			case c.Error != nil:
				res.message = firstNonEmpty(c.Error.Message, c.Error.Text)
			case c.Skipped != nil:
				res.message = c.Skipped.Message
			}
			if res.state == "" {
				res.state = stateOf(c)
			}
			out = append(out, res)
		}
	}
	return out, nil
}

// stateOf is for reports without ginkgo's status attribute.
func stateOf(c junitCase) string {
	switch {
	case c.Failure != nil || c.Error != nil:
		return "failed"
	case c.Skipped != nil:
		return "skipped"
	}
	return "passed"
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if strings.TrimSpace(v) != "" {
			return v
		}
	}
	return ""
}

// summary compares the selected tests' results with the known failures.
type summary struct {
	passed, failed, skipped []result
	// missing: selected but absent from the report (the run died early).
	missing []string
	// suiteFailures: a failed BeforeSuite/AfterSuite/report node.
	suiteFailures []result
	// newFailures fail the run; fixed are known failures that passed.
	newFailures []result
	fixed       []string
}

func summarize(results []result, run []string, known knownFailures) summary {
	byName := map[string]result{}
	var s summary
	for _, r := range results {
		if strings.HasPrefix(r.name, "[") && !strings.HasPrefix(r.name, "[sig-") {
			if r.failed() {
				s.suiteFailures = append(s.suiteFailures, r)
			}
			continue
		}
		// A run in parts (core, then network) has each part report the
		// other's tests as skipped: a test's result is that of the part
		// that ran it, or a core failure would read as skipped.
		if prev, seen := byName[r.name]; seen && r.notRun() && !prev.notRun() {
			continue
		}
		byName[r.name] = r
	}
	for _, n := range run {
		r, ok := byName[n]
		switch {
		case !ok:
			s.missing = append(s.missing, n)
		case r.state == "passed":
			s.passed = append(s.passed, r)
			if _, k := known[n]; k {
				s.fixed = append(s.fixed, n)
			}
		case r.state == "skipped" || r.state == "pending":
			s.skipped = append(s.skipped, r)
		default:
			s.failed = append(s.failed, r)
			if _, k := known[n]; !k {
				s.newFailures = append(s.newFailures, r)
			}
		}
	}
	for _, l := range [][]result{s.passed, s.failed, s.skipped, s.newFailures} {
		sort.Slice(l, func(i, j int) bool { return l[i].name < l[j].name })
	}
	sort.Strings(s.missing)
	sort.Strings(s.fixed)
	return s
}

// ok: no unexpected failure, nothing missing, the suite itself healthy.
func (s summary) ok() bool {
	return len(s.newFailures) == 0 && len(s.missing) == 0 && len(s.suiteFailures) == 0
}

func (s summary) print(w io.Writer, known knownFailures) {
	fmt.Fprintf(w, "\n==== node conformance summary ====\n")
	fmt.Fprintf(w, "passed %d, failed %d (%d known, %d new), skipped %d, missing %d\n",
		len(s.passed), len(s.failed), len(s.failed)-len(s.newFailures), len(s.newFailures), len(s.skipped), len(s.missing))
	for _, r := range s.suiteFailures {
		fmt.Fprintf(w, "\nSUITE FAILURE %s [%s]: %s\n", r.name, r.state, firstLine(r.message))
	}
	if len(s.failed) > 0 {
		fmt.Fprintf(w, "\nfailed:\n")
		for _, r := range s.failed {
			tag := "NEW  "
			if known == nil { // no known failures apply (the kubelet's run)
				tag = "fail "
			}
			reason, k := known[r.name]
			if k {
				tag = "known"
			}
			fmt.Fprintf(w, "  %s %s (%s)\n        %s\n", tag, r.name, r.time.Round(time.Second), firstLine(r.message))
			if k {
				fmt.Fprintf(w, "        known: %s\n", reason)
			}
		}
	}
	if len(s.skipped) > 0 {
		fmt.Fprintf(w, "\nskipped by the suite:\n")
		for _, r := range s.skipped {
			fmt.Fprintf(w, "  %s: %s\n", r.name, firstLine(r.message))
		}
	}
	if len(s.missing) > 0 {
		fmt.Fprintf(w, "\nselected but not in the report:\n")
		for _, n := range s.missing {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	if len(s.fixed) > 0 {
		fmt.Fprintf(w, "\nknown failures that now PASS (remove them from known-failures.txt):\n")
		for _, n := range s.fixed {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
}

// firstLine is the first non-empty line of a failure message, trimmed to
// a screen line or two.
func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			if len(l) > 300 {
				l = l[:300] + "..."
			}
			return l
		}
	}
	return ""
}
