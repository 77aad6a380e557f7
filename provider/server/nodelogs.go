package server

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"time"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// The kubelet's node log query (pkg/kubelet/kubelet_server_journal*.go,
// NodeLogQuery): /logs/ serves the node's log directory; with
// enableSystemLogQuery, /logs/?query=<service>&sinceTime=&untilTime=
// &tailLines=&pattern=&boot= asks journalctl for the service's unit, and
// ?query=<file> serves one file of the directory.
const (
	journalDateLayout = "2006-1-2 15:4:5"
	maxTailLines      = 100000
	maxServiceLength  = 256
	maxServices       = 4
	// DefaultNodeLogDir is the kubelet's nodeLogDir.
	DefaultNodeLogDir = "/var/log/"
	// nodeLogQueryTimeout bounds one query's journalctl runs, as the kubelet's.
	nodeLogQueryTimeout = 30 * time.Second
)

// serviceNameUnsafe is the kubelet's reServiceNameUnsafeCharacters: what a
// service name may not hold, so that no journalctl argument can be
// smuggled in through one.
var serviceNameUnsafe = regexp.MustCompile(`[^a-zA-Z\-_.:0-9@]+`)

// journalctl is the command a query runs (a variable for tests).
var journalctl = "journalctl"

// nodeLogQuery is one query: services (asked of journalctl) or files (of
// the log directory), and the options for services.
type nodeLogQuery struct {
	Services []string
	Files    []string
	logOptions
}

type logOptions struct {
	SinceTime *time.Time
	UntilTime *time.Time
	TailLines *int
	Boot      *int
	Pattern   string
}

// parseNodeLogQuery reads the query parameters as the kubelet's
// newNodeLogQuery: nil without any it knows (a plain file request).
func parseNodeLogQuery(query url.Values) (*nodeLogQuery, field.ErrorList) {
	var errs field.ErrorList
	var q nodeLogQuery
	queries, given := query["query"]
	for _, v := range queries {
		// A slash means a file; a name without one is a service, whose
		// logs may still come from a file (the heuristics below).
		if strings.ContainsAny(v, `/\`) {
			q.Files = append(q.Files, v)
		} else if strings.TrimSpace(v) != "" {
			q.Services = append(q.Services, v)
		}
	}
	if given && len(q.Files) == 0 && len(q.Services) == 0 {
		errs = append(errs, field.Invalid(field.NewPath("query"), queries, "may not be empty"))
	}
	parseTime := func(name string, dst **time.Time) {
		if v := query.Get(name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				errs = append(errs, field.Invalid(field.NewPath(name), v, "invalid time format"))
				return
			}
			*dst = &t
		}
	}
	parseInt := func(name string, dst **int) {
		if v := query.Get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				errs = append(errs, field.Invalid(field.NewPath(name), v, err.Error()))
				return
			}
			*dst = &n
		}
	}
	parseTime("sinceTime", &q.SinceTime)
	parseTime("untilTime", &q.UntilTime)
	parseInt("boot", &q.Boot)
	parseInt("tailLines", &q.TailLines)
	q.Pattern = query.Get("pattern")
	if len(errs) > 0 {
		return nil, errs
	}
	if reflect.DeepEqual(q, nodeLogQuery{}) {
		return nil, nil
	}
	return &q, nil
}

// validate is the kubelet's: services or one file, never both; no options
// with a file; the file in logDir; times in order; boot ≤ 0; tailLines in
// [0, 100000]; the pattern a valid regular expression.
func (q *nodeLogQuery) validate(logDir string) field.ErrorList {
	errs := validateServices(q.Services)
	switch {
	case len(q.Files) == 0 && len(q.Services) == 0:
		errs = append(errs, field.Required(field.NewPath("query"), "cannot be empty with options"))
	case len(q.Files) > 0 && len(q.Services) > 0:
		errs = append(errs, field.Invalid(field.NewPath("query"), fmt.Sprintf("%v, %v", q.Files, q.Services), "cannot specify a file and service"))
	case len(q.Files) > 1:
		errs = append(errs, field.Invalid(field.NewPath("query"), q.Files, "cannot specify more than one file"))
	case len(q.Files) == 1 && q.logOptions != (logOptions{}):
		errs = append(errs, field.Invalid(field.NewPath("query"), q.Files, "cannot specify file with options"))
	case len(q.Files) == 1:
		if root, err := os.OpenRoot(logDir); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("query"), q.Files, err.Error()))
		} else {
			defer func() { _ = root.Close() }()
			// Relative to the directory: the documented form is
			// ?query=/<file>, which os.Root (as the kubelet 1.35 calls
			// it) refuses as escaping.
			if _, err := root.Stat(strings.TrimLeft(filepath.ToSlash(q.Files[0]), "/")); err != nil {
				errs = append(errs, field.Invalid(field.NewPath("query"), q.Files, err.Error()))
			}
		}
	}
	if q.SinceTime != nil && q.UntilTime != nil && q.SinceTime.After(*q.UntilTime) {
		errs = append(errs, field.Invalid(field.NewPath("untilTime"), q.UntilTime, "must be after `sinceTime`"))
	}
	if q.Boot != nil && *q.Boot > 0 {
		errs = append(errs, field.Invalid(field.NewPath("boot"), *q.Boot, "must be less than 1"))
	}
	if q.TailLines != nil {
		if err := utilvalidation.IsInRange(*q.TailLines, 0, maxTailLines); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("tailLines"), *q.TailLines, err[0]))
		}
	}
	if _, err := syntax.Parse(q.Pattern, syntax.Perl); err != nil {
		errs = append(errs, field.Invalid(field.NewPath("pattern"), q.Pattern, err.Error()))
	}
	return errs
}

func validateServices(services []string) field.ErrorList {
	var errs field.ErrorList
	for _, s := range services {
		if err := safeServiceName(s); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("query"), s, err.Error()))
		}
	}
	if len(services) > maxServices {
		errs = append(errs, field.TooMany(field.NewPath("query"), len(services), maxServices))
	}
	return errs
}

// safeServiceName is the kubelet's, message included (which says 100 where
// the limit is 256).
func safeServiceName(s string) error {
	if len(s) > maxServiceLength {
		return fmt.Errorf("length must be less than 100")
	}
	if serviceNameUnsafe.MatchString(s) {
		return fmt.Errorf("input contains unsupported characters")
	}
	return nil
}

// journalArgs are journalctl's arguments for the query's services, as the
// kubelet's getLoggingCmd on Linux builds them.
func journalArgs(q *nodeLogQuery, services []string) []string {
	args := []string{"--utc", "--no-pager", "--output=short-precise"}
	if q.SinceTime != nil {
		args = append(args, "--since="+q.SinceTime.Format(journalDateLayout))
	}
	if q.UntilTime != nil {
		args = append(args, "--until="+q.UntilTime.Format(journalDateLayout))
	}
	if q.TailLines != nil {
		args = append(args, "--pager-end", fmt.Sprintf("--lines=%d", *q.TailLines))
	}
	for _, s := range services {
		if s != "" {
			args = append(args, "--unit="+s)
		}
	}
	if q.Pattern != "" {
		args = append(args, "--grep="+q.Pattern)
	}
	if q.Boot != nil {
		args = append(args, "--boot", fmt.Sprintf("%d", *q.Boot))
	}
	return args
}

// nodeLogsHandler is /logs/ as the kubelet serves it: 405 when the handler
// is off (enableSystemLogHandler false); the log directory's files and
// listings; with query on, the node log query.
func nodeLogsHandler(logDir string, enabled, query bool) http.Handler {
	if !enabled {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "logs endpoint is disabled.", http.StatusMethodNotAllowed)
		})
	}
	if logDir == "" {
		logDir = DefaultNodeLogDir
	}
	// Files through an os.Root: a symlink in the directory does not lead
	// out of it (the kubelet's http.Dir would follow it).
	file := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		root, err := os.OpenRoot(logDir)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer func() { _ = root.Close() }()
		http.FileServerFS(root.FS()).ServeHTTP(w, r)
	})
	if !query {
		return http.StripPrefix("/logs/", file)
	}
	return http.StripPrefix("/logs/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, errs := parseNodeLogQuery(r.URL.Query())
		if len(errs) > 0 {
			http.Error(w, errs.ToAggregate().Error(), http.StatusBadRequest)
			return
		}
		if q != nil {
			if r.URL.Path != "/" && r.URL.Path != "" {
				http.Error(w, "path not allowed in query mode", http.StatusNotAcceptable)
				return
			}
			if errs := q.validate(logDir); len(errs) > 0 {
				http.Error(w, errs.ToAggregate().Error(), http.StatusNotAcceptable)
				return
			}
			if len(q.Services) > 0 {
				serveJournal(w, r, q, logDir)
				return
			}
			if len(q.Files) == 1 {
				r.URL.Path = filepath.ToSlash(q.Files[0])
			}
		}
		file.ServeHTTP(w, r)
	}))
}

// serveJournal answers a query of services as plain text, gzipped when
// the caller accepts only gzip (as the kubelet's journalServer).
func serveJournal(w http.ResponseWriter, r *http.Request, q *nodeLogQuery, logDir string) {
	var out io.Writer = w
	w.Header().Set("Content-Type", "text/plain;charset=UTF-8")
	if r.Header.Get("Accept-Encoding") == "gzip" {
		w.Header().Set("Content-Encoding", "gzip")
		gz, err := gzip.NewWriterLevel(out, gzip.BestSpeed)
		if err != nil {
			fmt.Fprintf(w, "\nfailed to get gzip writer: %v\n", err)
			return
		}
		defer gz.Close()
		out = gz
	}
	ctx, cancel := context.WithTimeout(r.Context(), nodeLogQueryTimeout)
	defer cancel()
	q.copy(ctx, out, logDir)
}

// copy writes the services' logs: journalctl's for those the journal
// knows, else a file of the log directory named after the service (the
// kubelet's heuristics); a failure is a line in the output.
func (q *nodeLogQuery) copy(ctx context.Context, w io.Writer, logDir string) {
	var journal, files []string
	for _, s := range q.Services {
		if inJournal(ctx, s) {
			journal = append(journal, s)
		} else {
			files = append(files, s)
		}
	}
	if len(journal) > 0 {
		cmd := exec.CommandContext(ctx, journalctl, journalArgs(q, journal)...)
		cmd.Stdout, cmd.Stderr = w, w
		if err := cmd.Run(); err != nil {
			var exit *exec.ExitError
			if !errors.As(err, &exit) && (q.Boot == nil || *q.Boot == 0) {
				fmt.Fprintf(w, "\nerror: journal output not available\n")
			}
		}
	}
	if len(files) > 0 && q.logOptions != (logOptions{}) {
		fmt.Fprintf(w, "\noptions present and query resolved to log files for %v\ntry without specifying options\n", files)
		return
	}
	for _, s := range files {
		if ctx.Err() != nil {
			fmt.Fprintf(w, "\ncontext error: %v\n", ctx.Err())
			return
		}
		copyServiceFile(ctx, w, logDir, s)
	}
}

// inJournal says whether the journal has entries of the service's unit:
// journalctl does not fail for a unit it never saw.
func inJournal(ctx context.Context, service string) bool {
	out, err := exec.CommandContext(ctx, journalctl, "--field", "_SYSTEMD_UNIT").CombinedOutput()
	return err == nil && strings.Contains(string(out), service+".service")
}

// copyServiceFile copies the first of <dir>/<service>, <service>.log and
// <service>/<service>.log there is.
func copyServiceFile(ctx context.Context, w io.Writer, dir, service string) {
	var err error
	for _, name := range []string{service, service + ".log", service + "/" + service + ".log"} {
		if err = copyLogFile(ctx, w, dir, name); !errors.Is(err, os.ErrNotExist) {
			break
		}
	}
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(w, "\nlog not found for %s\n", service)
	case err != nil:
		fmt.Fprintf(w, "\nerror getting log for %s: %v\n", service, err)
	}
}

func copyLogFile(ctx context.Context, w io.Writer, dir, name string) error {
	f, err := os.OpenInRoot(dir, name)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.IsDir() { // /var/log/<service>/ is where the third name looks
		return os.ErrNotExist
	}
	_, err = io.Copy(w, ctxReader{ctx, f})
	return err
}

// ctxReader stops a copy once its context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
