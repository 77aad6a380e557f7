package probes

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
)

// ErrExecTimeout is returned by Target.Exec when the command outran its timeout.
var ErrExecTimeout = errors.New("command timed out")

// execProbe runs the command in the container: exit code 0 is success, and
// the output is the message.
func execProbe(ctx context.Context, e *v1.ExecAction, t Target, timeout time.Duration) (Result, string) {
	out, code, err := t.Exec(ctx, expandStatic(e.Command, t.Container), timeout)
	if errors.Is(err, ErrExecTimeout) {
		return Failure, fmt.Sprintf("command %q timed out", strings.Join(e.Command, " "))
	}
	if err != nil {
		return Failure, err.Error()
	}
	if code != 0 {
		return Failure, string(out)
	}
	return Success, string(out)
}
