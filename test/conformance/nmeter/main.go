// Command nmeter is the stand-in for busybox's nmeter applet in the test
// images, which Debian's busybox is built without. The kubelet's node e2e
// suite stamps its lifecycle containers' log lines with
// `date -u +%FT$(nmeter -d0 '%3t' | head -n1)Z` (busybox's date has no
// sub-second field) and orders the containers' starts and exits by them.
// Only nmeter's time directive is served: %t (HH:MM:SS) and %Nt (N digits
// of the second's fraction, 1-6), in UTC as busybox prints it under -u's
// date; the rest of the format is copied. One line every -d milliseconds
// (default 1000; 0: one line after another), until the reader goes away.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

func main() {
	delay, format, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "nmeter:", err)
		fmt.Fprintln(os.Stderr, "usage: nmeter [-d MSEC] FORMAT")
		os.Exit(1)
	}
	for {
		if _, err := fmt.Println(render(format, time.Now().UTC())); err != nil {
			return // head -n1 closed the pipe: done, as busybox's is
		}
		time.Sleep(delay)
	}
}

func parseArgs(args []string) (time.Duration, string, error) {
	delay := time.Second
	var format string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-d" && i+1 < len(args):
			i++
			a = "-d" + args[i]
			fallthrough
		case strings.HasPrefix(a, "-d"):
			ms, err := strconv.Atoi(strings.TrimPrefix(a, "-d"))
			if err != nil || ms < 0 {
				return 0, "", fmt.Errorf("bad delay %q", a)
			}
			delay = time.Duration(ms) * time.Millisecond
		case format == "":
			format = a
		default:
			return 0, "", fmt.Errorf("unexpected argument %q", a)
		}
	}
	if format == "" {
		return 0, "", fmt.Errorf("no format")
	}
	return delay, format, nil
}

// render expands the %t directives of format at now.
func render(format string, now time.Time) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 >= len(format) {
			b.WriteByte(c)
			continue
		}
		j := i + 1
		digits := 0
		if d := format[j]; d >= '0' && d <= '9' {
			digits = int(d - '0')
			j++
		}
		if j < len(format) && format[j] == 't' {
			b.WriteString(now.Format("15:04:05"))
			if digits > 6 {
				digits = 6
			}
			if digits > 0 {
				frac := fmt.Sprintf("%06d", now.Nanosecond()/1000)
				b.WriteString("." + frac[:digits])
			}
			i = j
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
