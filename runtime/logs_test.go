package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A terminal's "\r\n" ends a record without its carriage return, as in
// CRI's log; a carriage return inside a line stays.
func TestLogSinkTerminalLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.log")
	sink, err := newLogSink(path)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = sink.out.Write([]byte("one\r\n\r/ # two\r\nthree\n"))
	sink.close()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		rec, ok := parseLogLine([]byte(line))
		if !ok || rec.stream != "stdout" || rec.partial {
			t.Fatalf("record %q", line)
		}
		got = append(got, string(rec.content))
	}
	want := []string{"one", "\r/ # two", "three"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("records %q, want %q", got, want)
	}
}
