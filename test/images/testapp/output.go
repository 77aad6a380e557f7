package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

var (
	outMu sync.Mutex
	// stdout is replaced in unit tests to keep their output readable.
	stdout io.Writer = os.Stdout
	// exit is swapped in tests so /exit can be exercised without ending them.
	exit = os.Exit
)

// printLine writes one line to stdout; the lock keeps lines from
// interleaving when several servers log at once.
func printLine(s string) {
	outMu.Lock()
	defer outMu.Unlock()
	fmt.Fprintln(stdout, s)
}

// logf prints a timestamped line, the form tests grep for.
func logf(format string, args ...any) {
	printLine(time.Now().UTC().Format(time.RFC3339Nano) + " " + fmt.Sprintf(format, args...))
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}
