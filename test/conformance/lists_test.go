package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "list.txt")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadSelection(t *testing.T) {
	p := writeFile(t, `# comment

run  [sig-node] A runs [NodeConformance]
skip [sig-node] B is slow [Slow] # [Slow]: takes long
run [sig-node] C "quoted" *stars* [Conformance]
`)
	s, err := readSelection(p)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"[sig-node] A runs [NodeConformance]", `[sig-node] C "quoted" *stars* [Conformance]`}; strings.Join(s.run, "|") != strings.Join(want, "|") {
		t.Errorf("run = %q, want %q", s.run, want)
	}
	if r := s.skipped["[sig-node] B is slow [Slow]"]; r != "[Slow]: takes long" {
		t.Errorf("skip reason = %q", r)
	}
	if len(s.always) != 0 {
		t.Errorf("always = %q", s.always)
	}
}

// storage.txt's "always" tests run with -storage and with make conformance.
func TestReadSelectionAlways(t *testing.T) {
	s, err := readSelection(writeFile(t, "run  [sig-storage] A\nalways [sig-storage] B\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(s.run, "|") != "[sig-storage] A|[sig-storage] B" || strings.Join(s.always, "|") != "[sig-storage] B" {
		t.Errorf("run %q, always %q", s.run, s.always)
	}
	if _, err := readSelection(writeFile(t, "always A # why\n")); err == nil {
		t.Error("an always line with a reason was accepted")
	}
	if p := checkSelection(nil, &selection{always: []string{"X"}}, nil); len(p) != 1 || !strings.Contains(p[0], `an "always" line in selection.txt`) {
		t.Errorf("always in selection.txt: %q", p)
	}
}

func TestReadSelectionErrors(t *testing.T) {
	for body, want := range map[string]string{
		"skip [sig-node] B\n":             "needs a reason",
		"run A # why\n":                   "takes no reason",
		"exclude A # x\n":                 "want \"run NAME\"",
		"run A\nrun A\n":                  "listed twice",
		"run A\nskip A # dup\n":           "listed twice",
		"# c\nrun A\nskip B #notspaced\n": "list.txt:3",
		"run \n":                          "no test name",
		"skip  # only a reason\n":         "needs a reason",
	} {
		_, err := readSelection(writeFile(t, body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want it to contain %q", body, err, want)
		}
	}
}

func TestReadKnownFailures(t *testing.T) {
	k, err := readKnownFailures(writeFile(t, "# c\n[sig-node] A [NodeConformance] # hostlet lacks X # and Y\n"))
	if err != nil {
		t.Fatal(err)
	}
	// The last separator splits, so a reason may not hold one, but a
	// name never does (checked against the suite).
	if r := k["[sig-node] A [NodeConformance] # hostlet lacks X"]; r != "and Y" {
		t.Errorf("known = %q", k)
	}
	if _, err := readKnownFailures(writeFile(t, "[sig-node] A\n")); err == nil {
		t.Error("a line without a reason was accepted")
	}
}

func TestParseTestListAndCheck(t *testing.T) {
	out := `The following spec names can be used with 'ginkgo run --focus/skip':
    k8s.io/kubernetes@v1.35.4/test/e2e/common/node/pods.go:208: [sig-node] Pods should get a host IP [NodeConformance] [Conformance]
    k8s.io/kubernetes@v1.35.4/test/e2e/common/node/pods.go:725: [sig-node] Pods should cap back-off [Slow] [NodeConformance]
    k8s.io/kubernetes@v1.35.4/test/e2e/node/pods.go:73: [sig-node] Pods Extended not conformance
    k8s.io/kubernetes@v1.35.4/test/e2e/apps/job.go:1: [sig-apps] Job should run [Conformance]
    k8s.io/kubernetes@v1.35.4/test/e2e/common/storage/empty_dir.go:1: [sig-storage] EmptyDir works [NodeConformance]
`
	all, err := parseTestList(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 5 {
		t.Fatalf("parsed %d tests, want 5: %v", len(all), all)
	}
	sel := &selection{
		run:     []string{"[sig-node] Pods should get a host IP [NodeConformance] [Conformance]", "[sig-apps] Job should run [Conformance]", "gone"},
		skipped: map[string]string{"[sig-node] Pods should cap back-off [Slow] [NodeConformance]": "[Slow]"},
	}
	known := knownFailures{"[sig-node] Pods should cap back-off [Slow] [NodeConformance]": "x"}
	got := strings.Join(checkSelection(all, sel, known), "\n")
	for _, want := range []string{
		"not in selection.txt (add a run or skip line): [sig-storage] EmptyDir works",
		"outside the node-conformance universe: [sig-apps] Job should run",
		"not in this e2e.test (renamed or removed upstream?): gone",
		"known-failures.txt but not a \"run\" test of selection.txt: [sig-node] Pods should cap back-off",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Pods Extended not conformance") {
		t.Errorf("an untagged test was required:\n%s", got)
	}
}

func TestFocusRegexpMatchesExactlyTheNames(t *testing.T) {
	names := []string{
		`[sig-node] Probing container should *not* be restarted with a exec "cat /tmp/health" liveness probe [NodeConformance] [Conformance]`,
		"[sig-node] Pods should be updated [NodeConformance] [Conformance]",
	}
	re := regexp.MustCompile(focusRegexp(names))
	// ginkgo matches "<suite description> <full name>".
	for _, n := range names {
		if !re.MatchString("Kubernetes e2e suite " + n) {
			t.Errorf("%q does not match", n)
		}
	}
	for _, n := range []string{
		"[sig-node] Pods should be updated [NodeConformance]",
		"[sig-node] Pods should be updated [NodeConformance] [Conformance] [Slow]",
		"[sig-node] Probing container should *not* be restarted with a exec",
	} {
		if re.MatchString("Kubernetes e2e suite " + n) {
			t.Errorf("%q matches", n)
		}
	}
}

func TestCheckStorage(t *testing.T) {
	all := []listedTest{
		{"k8s.io/kubernetes@v1.35.4/test/e2e/common/storage/empty_dir.go:1", "[sig-storage] EmptyDir works [NodeConformance]"},
		{"k8s.io/kubernetes@v1.35.4/test/e2e/common/storage/empty_dir.go:2", "[sig-storage] EmptyDir untagged"},
		{"k8s.io/kubernetes@v1.35.4/test/e2e/storage/host_path_type.go:3", "[sig-storage] HostPathType File [Slow] works"},
		{"k8s.io/kubernetes@v1.35.4/test/e2e/apps/job.go:4", "[sig-apps] Job runs"},
	}
	sel := &selection{run: []string{"[sig-storage] EmptyDir works [NodeConformance]"}, skipped: map[string]string{}}
	storage := &selection{
		run:     []string{"[sig-storage] EmptyDir untagged", "[sig-storage] HostPathType File [Slow] works", "[sig-storage] EmptyDir works [NodeConformance]", "[sig-apps] Job runs"},
		skipped: map[string]string{"gone": "renamed"},
	}
	got := checkStorage(all, sel, storage)
	want := []string{
		"in storage.txt but in selection.txt's universe (list it there): [sig-storage] EmptyDir works [NodeConformance]",
		"in storage.txt but not a [sig-storage] test: [sig-apps] Job runs",
		"in storage.txt but not in this e2e.test (renamed or removed upstream?): gone",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The lists in the repo must parse; their consistency with the suite is
// checked by the runner (it needs e2e.test).
func TestRepoLists(t *testing.T) {
	sel, err := readSelection("selection.txt")
	if err != nil {
		t.Fatal(err)
	}
	storage, err := readSelection("storage.txt")
	if err != nil {
		t.Fatal(err)
	}
	known, err := readKnownFailures("known-failures.txt")
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]bool{}
	for _, n := range append(sel.run, storage.run...) {
		runs[n] = true
	}
	for n := range known {
		if !runs[n] {
			t.Errorf("known failure %q is not a run test of selection.txt or storage.txt", n)
		}
	}
}
