package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
)

// selection is test/conformance/selection.txt: every test of the universe
// (see inUniverse) on one line, either run or skipped with a reason:
//
//	run  NAME
//	skip NAME  # REASON
//
// Blank lines and lines starting with # are comments.
type selection struct {
	run     []string          // in file order
	skipped map[string]string // name -> reason
	// always are storage.txt's cheap "always NAME" tests (also in run):
	// make conformance runs them with selection.txt's.
	always []string
}

// knownFailures is test/conformance/known-failures.txt: NAME  # REASON per
// line; tests expected to fail on hostlet today.
type knownFailures map[string]string

// reasonSep separates a name from its reason; no upstream test name
// contains it (checked against the universe by checkSelection).
const reasonSep = " # "

func readSelection(path string) (*selection, error) {
	s := &selection{skipped: map[string]string{}}
	seen := map[string]bool{}
	err := readLines(path, func(n int, line string) error {
		verb, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		var name, reason string
		switch verb {
		case "run", "always":
			name = rest
			if strings.Contains(name, reasonSep) {
				return fmt.Errorf("a run line takes no reason")
			}
		case "skip":
			var ok bool
			if name, reason, ok = cutReason(rest); !ok {
				return fmt.Errorf("a skip line needs a reason: skip NAME%sREASON", reasonSep)
			}
		default:
			return fmt.Errorf("want \"run NAME\", \"always NAME\" or \"skip NAME%sREASON\"", reasonSep)
		}
		if name == "" {
			return fmt.Errorf("no test name")
		}
		if seen[name] {
			return fmt.Errorf("%q is listed twice", name)
		}
		seen[name] = true
		if verb == "always" {
			s.always = append(s.always, name)
		}
		if verb != "skip" {
			s.run = append(s.run, name)
		} else {
			s.skipped[name] = reason
		}
		return nil
	})
	return s, err
}

func readKnownFailures(path string) (knownFailures, error) {
	k := knownFailures{}
	err := readLines(path, func(n int, line string) error {
		name, reason, ok := cutReason(line)
		if !ok {
			return fmt.Errorf("want NAME%sREASON", reasonSep)
		}
		if _, dup := k[name]; dup {
			return fmt.Errorf("%q is listed twice", name)
		}
		k[name] = reason
		return nil
	})
	return k, err
}

// cutReason splits "NAME # REASON" at the last separator.
func cutReason(s string) (name, reason string, ok bool) {
	i := strings.LastIndex(s, reasonSep)
	if i < 0 {
		return s, "", false
	}
	name, reason = strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+len(reasonSep):])
	return name, reason, name != "" && reason != ""
}

// readLines calls fn for every line that is neither blank nor a comment,
// and prefixes its error with the file and line number.
func readLines(path string, fn func(n int, line string) error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return scanLines(path, f, fn)
}

func scanLines(path string, r io.Reader, fn func(n int, line string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if err := fn(n, line); err != nil {
			return fmt.Errorf("%s:%d: %w", path, n, err)
		}
	}
	return sc.Err()
}

// universeDirs are the e2e source dirs whose node-level conformance tests
// the selection must account for.
var universeDirs = []string{"test/e2e/common/node/", "test/e2e/node/", "test/e2e/common/storage/",
	"test/e2e/common/network/", "test/e2e/network/"}

// inUniverse says whether a test (source location as e2e.test --list-tests
// prints it, full name) must appear in selection.txt.
func inUniverse(location, name string) bool {
	if !strings.Contains(name, "[NodeConformance]") && !strings.Contains(name, "[Conformance]") {
		return false
	}
	for _, d := range universeDirs {
		if strings.Contains(location, "/"+d) {
			return true
		}
	}
	return false
}

// listedTest is one line of e2e.test --list-tests:
// "    k8s.io/kubernetes@v1.35.4/test/e2e/node/pods.go:123: NAME".
type listedTest struct{ location, name string }

var listLineRE = regexp.MustCompile(`^\s*(\S+\.go:\d+): (.+)$`)

func parseTestList(r io.Reader) ([]listedTest, error) {
	var out []listedTest
	err := scanLines("e2e.test --list-tests", r, func(_ int, line string) error {
		if m := listLineRE.FindStringSubmatch(line); m != nil {
			out = append(out, listedTest{location: m[1], name: m[2]})
		}
		return nil
	})
	if err == nil && len(out) == 0 {
		err = fmt.Errorf("e2e.test --list-tests listed no tests")
	}
	return out, err
}

// checkSelection compares the lists with the suite: every test of the
// universe must be in selection.txt exactly once, every name there must
// exist, and every known failure must be a test that runs. Problems are
// returned as lines to print; none means consistent.
func checkSelection(all []listedTest, sel *selection, known knownFailures) []string {
	exists := map[string]bool{}
	universe := map[string]bool{}
	for _, t := range all {
		exists[t.name] = true
		if inUniverse(t.location, t.name) {
			universe[t.name] = true
		}
	}
	listed := map[string]bool{}
	for _, n := range sel.run {
		listed[n] = true
	}
	for n := range sel.skipped {
		listed[n] = true
	}
	var problems []string
	for _, n := range sel.always {
		problems = append(problems, "an \"always\" line in selection.txt (run it): "+n)
	}
	for n := range universe {
		if strings.Contains(n, reasonSep) {
			problems = append(problems, fmt.Sprintf("test name contains %q, which the lists use as separator: %s", reasonSep, n))
		}
		if !listed[n] {
			problems = append(problems, "not in selection.txt (add a run or skip line): "+n)
		}
	}
	for n := range listed {
		if !exists[n] {
			problems = append(problems, "in selection.txt but not in this e2e.test (renamed or removed upstream?): "+n)
		} else if !universe[n] {
			problems = append(problems, "in selection.txt but outside the node-conformance universe: "+n)
		}
	}
	runs := map[string]bool{}
	for _, n := range sel.run {
		runs[n] = true
	}
	for n := range known {
		if !runs[n] {
			problems = append(problems, "in known-failures.txt but not a \"run\" test of selection.txt: "+n)
		}
	}
	sort.Strings(problems)
	return problems
}

// checkStorage compares storage.txt with the suite: its tests are the
// [sig-storage] specs outside selection.txt's universe (test/e2e/storage,
// and common/storage's untagged ones) that one node runs without a CSI
// driver; each must exist, be listed once (there and in selection.txt) and
// not be in the universe.
func checkStorage(all []listedTest, sel, storage *selection) []string {
	inSel := map[string]bool{}
	for _, n := range sel.run {
		inSel[n] = true
	}
	for n := range sel.skipped {
		inSel[n] = true
	}
	loc := map[string]string{}
	for _, t := range all {
		loc[t.name] = t.location
	}
	var problems []string
	check := func(n string) {
		l, ok := loc[n]
		switch {
		case !ok:
			problems = append(problems, "in storage.txt but not in this e2e.test (renamed or removed upstream?): "+n)
		case inUniverse(l, n):
			problems = append(problems, "in storage.txt but in selection.txt's universe (list it there): "+n)
		case !strings.HasPrefix(n, "[sig-storage] "):
			problems = append(problems, "in storage.txt but not a [sig-storage] test: "+n)
		case inSel[n]:
			problems = append(problems, "in both storage.txt and selection.txt: "+n)
		}
	}
	for _, n := range storage.run {
		check(n)
	}
	for n := range storage.skipped {
		check(n)
	}
	sort.Strings(problems)
	return problems
}

// focusRegexp matches exactly the given tests. Ginkgo matches --focus
// against "<suite description> <full test name>", so each name is anchored
// at a preceding space and at the end.
func focusRegexp(names []string) string {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = regexp.QuoteMeta(n)
	}
	sort.Strings(quoted)
	return " (?:" + strings.Join(quoted, "|") + ")$"
}
