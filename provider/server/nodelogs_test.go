package server

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"
)

// journalctl's arguments as the kubelet's getLoggingCmd builds them.
func TestJournalArgs(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	until := time.Date(2026, 11, 12, 13, 14, 15, 0, time.UTC)
	base := []string{"--utc", "--no-pager", "--output=short-precise"}
	for _, tc := range []struct {
		name     string
		q        nodeLogQuery
		services []string
		want     []string
	}{
		{"basic", nodeLogQuery{}, nil, base},
		{"two services", nodeLogQuery{}, []string{"p1", "p2"}, append(append([]string{}, base...), "--unit=p1", "--unit=p2")},
		{"an empty service", nodeLogQuery{}, []string{"p1", "", "p2"}, append(append([]string{}, base...), "--unit=p1", "--unit=p2")},
		{"every option", nodeLogQuery{logOptions: logOptions{SinceTime: &since, UntilTime: &until, TailLines: ptr.To(10), Pattern: "err.*r", Boot: ptr.To(-1)}},
			[]string{"hostlet"}, append(append([]string{}, base...), "--since=2026-1-2 03:4:5", "--until=2026-11-12 13:14:15",
				"--pager-end", "--lines=10", "--unit=hostlet", "--grep=err.*r", "--boot", "-1")},
		{"boot 0", nodeLogQuery{logOptions: logOptions{Boot: ptr.To(0)}}, []string{"kubelet"}, append(append([]string{}, base...), "--unit=kubelet", "--boot", "0")},
	} {
		if got := journalArgs(&tc.q, tc.services); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestParseNodeLogQuery(t *testing.T) {
	valid := "2019-12-04T02:00:00Z"
	vt, _ := time.Parse(time.RFC3339, valid)
	for _, tc := range []struct {
		query   url.Values
		want    *nodeLogQuery
		wantErr bool
	}{
		{url.Values{}, nil, false},
		{url.Values{"unknown": {"true"}}, nil, false},
		{url.Values{"sinceTime": {""}}, nil, false},
		{url.Values{"sinceTime": {"2019-12-04 02:00:00"}}, nil, true},
		{url.Values{"sinceTime": {valid}}, &nodeLogQuery{logOptions: logOptions{SinceTime: &vt}}, false},
		{url.Values{"untilTime": {"2019-12-04 02"}}, nil, true},
		{url.Values{"untilTime": {valid}}, &nodeLogQuery{logOptions: logOptions{UntilTime: &vt}}, false},
		{url.Values{"tailLines": {"100"}}, &nodeLogQuery{logOptions: logOptions{TailLines: ptr.To(100)}}, false},
		{url.Values{"tailLines": {"foo"}}, nil, true},
		{url.Values{"tailLines": {" "}}, nil, true},
		{url.Values{"pattern": {"foo"}}, &nodeLogQuery{logOptions: logOptions{Pattern: "foo"}}, false},
		{url.Values{"boot": {"-23"}}, &nodeLogQuery{logOptions: logOptions{Boot: ptr.To(-23)}}, false},
		{url.Values{"boot": {"foo"}}, nil, true},
		{url.Values{"query": {""}}, nil, true},
		{url.Values{"query": {"   ", "    "}}, nil, true},
		{url.Values{"query": {"foo", "bar"}}, &nodeLogQuery{Services: []string{"foo", "bar"}}, false},
		{url.Values{"query": {"foo", "/bar"}}, &nodeLogQuery{Services: []string{"foo"}, Files: []string{"/bar"}}, false},
		{url.Values{"query": {"/foo", `\bar`}}, &nodeLogQuery{Files: []string{"/foo", `\bar`}}, false},
	} {
		got, errs := parseNodeLogQuery(tc.query)
		if (len(errs) > 0) != tc.wantErr || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v %v", tc.query.Encode(), got, errs)
		}
	}
}

func TestValidateNodeLogQuery(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "test1.log"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	since := time.Date(2023, 1, 4, 2, 0, 0, 0, time.UTC)
	until := since.Add(time.Hour)
	for _, tc := range []struct {
		name    string
		q       nodeLogQuery
		wantErr string
	}{
		{"empty", nodeLogQuery{}, "query: Required value: cannot be empty with options"},
		{"one service", nodeLogQuery{Services: []string{"svc1"}}, ""},
		{"unit names", nodeLogQuery{Services: []string{"svc.foo", "svc_foo", "svc@foo", "svc:foo"}}, ""},
		{"five services", nodeLogQuery{Services: []string{"a", "b", "c", "d", "e"}}, "must have at most 4 items"},
		{"newline", nodeLogQuery{Services: []string{"svc\n"}}, "input contains unsupported characters"},
		{"an argument", nodeLogQuery{Services: []string{"--file=x"}}, "input contains unsupported characters"},
		{"dashes", nodeLogQuery{Services: []string{"--no-pager"}}, ""}, // glued to --unit=, it is a unit's name
		{"a space", nodeLogQuery{Services: []string{"a b"}}, "input contains unsupported characters"},
		{"too long", nodeLogQuery{Services: []string{strings.Repeat("s", 257)}}, "length must be less than 100"},
		{"service and file", nodeLogQuery{Services: []string{"a"}, Files: []string{"/test1.log"}}, "cannot specify a file and service"},
		{"two files", nodeLogQuery{Files: []string{"/test1.log", "/x"}}, "cannot specify more than one file"},
		{"file", nodeLogQuery{Files: []string{"/test1.log"}}, ""},
		{"file with options", nodeLogQuery{Files: []string{"/test1.log"}, logOptions: logOptions{Pattern: "x"}}, "cannot specify file with options"},
		{"missing file", nodeLogQuery{Files: []string{"/nope.log"}}, "no such file"},
		{"file outside", nodeLogQuery{Files: []string{"../../etc/passwd"}}, "path escapes from parent"},
		{"since after until", nodeLogQuery{Services: []string{"a"}, logOptions: logOptions{SinceTime: &until, UntilTime: &since}}, "must be after `sinceTime`"},
		{"boot 1", nodeLogQuery{Services: []string{"a"}, logOptions: logOptions{Boot: ptr.To(1)}}, "must be less than 1"},
		{"tailLines", nodeLogQuery{Services: []string{"a"}, logOptions: logOptions{TailLines: ptr.To(100000)}}, ""},
		{"tailLines too many", nodeLogQuery{Services: []string{"a"}, logOptions: logOptions{TailLines: ptr.To(100001)}}, "must be between 0 and 100000"},
		{"bad pattern", nodeLogQuery{Services: []string{"a"}, logOptions: logOptions{Pattern: `foo\`}}, "pattern: Invalid value"},
	} {
		errs := tc.q.validate(dir)
		switch {
		case tc.wantErr == "" && len(errs) > 0:
			t.Errorf("%s: %v", tc.name, errs.ToAggregate())
		case tc.wantErr != "" && (len(errs) == 0 || !strings.Contains(errs.ToAggregate().Error(), tc.wantErr)):
			t.Errorf("%s: %v, want %q", tc.name, errs.ToAggregate(), tc.wantErr)
		}
	}
}

// /logs/ as the kubelet serves it, journalctl a script that prints its
// arguments and lists the unit "known.service" in the journal.
func TestNodeLogsHandler(t *testing.T) {
	dir := t.TempDir()
	logDir := filepath.Join(dir, "log")
	for name, data := range map[string]string{"app.log": "app line\n", "svc/svc.log": "svc line\n"} {
		p := filepath.Join(logDir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("bait"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(logDir, "escape.log")); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "journalctl")
	if err := os.WriteFile(script, []byte("#!/bin/sh\nif [ \"$1\" = --field ]; then echo known.service; exit 0; fi\necho \"journalctl $*\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	defer func(old string) { journalctl = old }(journalctl)
	journalctl = script

	get := func(h http.Handler, path string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, rec.Body.String()
	}
	off := nodeLogsHandler(logDir, false, false)
	if code, body := get(off, "/logs/"); code != 405 || body != "logs endpoint is disabled.\n" {
		t.Errorf("disabled: %d %q", code, body)
	}
	files := nodeLogsHandler(logDir, true, false)
	if code, body := get(files, "/logs/app.log"); code != 200 || body != "app line\n" {
		t.Errorf("a file: %d %q", code, body)
	}
	if code, body := get(files, "/logs/"); code != 200 || !strings.Contains(body, `<a href="app.log">`) {
		t.Errorf("the listing: %d %q", code, body)
	}
	if code, body := get(files, "/logs/escape.log"); code == 200 || strings.Contains(body, "bait") {
		t.Errorf("a symlink out of the directory followed: %d %q", code, body)
	}
	if code, body := get(files, "/logs/?query=known"); code != 200 || !strings.Contains(body, `<a href="app.log">`) {
		t.Errorf("a query without enableSystemLogQuery is a plain request: %d %q", code, body)
	}

	q := nodeLogsHandler(logDir, true, true)
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/logs/app.log", 200, "app line\n"},
		{"/logs/?query=known&tailLines=5&sinceTime=2026-01-02T03:04:05Z&pattern=x", 200,
			"journalctl --utc --no-pager --output=short-precise --since=2026-1-2 03:4:5 --pager-end --lines=5 --unit=known --grep=x\n"},
		// Not in the journal: the service's file, by the heuristics.
		{"/logs/?query=svc", 200, "svc line\n"},
		{"/logs/?query=app", 200, "app line\n"},
		{"/logs/?query=nosuch", 200, "\nlog not found for nosuch\n"},
		{"/logs/?query=app&tailLines=3", 200, "\noptions present and query resolved to log files for [app]\ntry without specifying options\n"},
		{"/logs/?query=/app.log", 200, "app line\n"},
		{"/logs/app.log?query=known", 406, "path not allowed in query mode\n"},
		{"/logs/?query=", 400, "query: Invalid value: [\"\"]: may not be empty\n"},
		{"/logs/?query=known&tailLines=x", 400, "tailLines: Invalid value: \"x\": strconv.Atoi: parsing \"x\": invalid syntax\n"},
		{"/logs/?query=known&sinceTime=yesterday", 400, "sinceTime: Invalid value: \"yesterday\": invalid time format\n"},
		{"/logs/?query=a%20b", 406, "query: Invalid value: \"a b\": input contains unsupported characters\n"},
		{"/logs/?query=known&boot=1", 406, "boot: Invalid value: 1: must be less than 1\n"},
		{"/logs/?query=known&tailLines=100001", 406, "tailLines: Invalid value: 100001: must be between 0 and 100000, inclusive\n"},
		{"/logs/?query=/app.log&pattern=x", 406, "query: Invalid value: [\"/app.log\"]: cannot specify file with options\n"},
		{"/logs/?query=/escape.log", 406, ""},
	} {
		code, body := get(q, tc.path)
		if code != tc.code || (tc.body != "" && body != tc.body) || strings.Contains(body, "bait") {
			t.Errorf("%s: %d %q, want %d %q", tc.path, code, body, tc.code, tc.body)
		}
	}
}
