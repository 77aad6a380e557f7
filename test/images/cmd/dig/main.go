// Command dig is the stand-in for BIND's dig in the conformance images
// (agnhost, jessie-dnsutils): the e2e DNS specs' probe pods run
//
//	dig +notcp +noall +answer +search NAME A|AAAA|SRV|PTR
//	dig +tcp +noall +answer +search NAME ...
//	dig +short NAME CNAME|A
//
// and test whether the output is empty or equals a value. It implements
// those options with BIND's semantics:
//
//   - +search tries the name in resolv.conf's search domains, then as it is,
//     when it has fewer dots than ndots; otherwise (or ending in a dot) only
//     as it is. Only NXDOMAIN moves on to the next name (dighost.c's
//     next_origin); any other answer, SERVFAIL or NOERROR without records,
//     is the result.
//   - +noall +answer prints the answer section's records in dig's columns;
//     +short prints their data only.
//   - exit status 0 for any answer (NXDOMAIN too), 1 for a usage error, 9
//     when no server replied.
//
// Also: @SERVER, -p PORT, -t TYPE, -x ADDR, class IN, +[no]tcp (+[no]vc),
// +[no]search (+[no]defname), +time=S, +tries=N, +ndots=N. dig's other
// sections and options are refused (exit 1) rather than half done: a
// caller reading them would be misled.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/hostlet/hostlet/test/images/resolver"
)

type options struct {
	name          string
	qtype         uint16
	server, port  string
	tcp, search   bool
	answer, short bool
	all           bool // the sections this stand-in does not print are still on
	timeout       time.Duration
	tries         int
	ndots         int // -1: resolv.conf's
}

func main() {
	o, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "dig:", err)
		os.Exit(1)
	}
	os.Exit(run(o, resolver.ResolvConf, os.Stdout, os.Stderr))
}

func defaults() options {
	return options{qtype: dns.TypeA, port: "53", all: true, answer: true, timeout: 5 * time.Second, tries: 3, ndots: -1}
}

func parse(args []string) (options, error) {
	o := defaults()
	typeSet, classSet := false, false
	next := func(i *int, flag string) (string, error) {
		if *i+1 >= len(args) {
			return "", fmt.Errorf("%s needs an argument", flag)
		}
		*i++
		return args[*i], nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case strings.HasPrefix(a, "@"):
			o.server = a[1:]
		case strings.HasPrefix(a, "+"):
			if err := o.plus(a[1:]); err != nil {
				return o, err
			}
		case a == "-p" || a == "-t" || a == "-x":
			v, err := next(&i, a)
			if err != nil {
				return o, err
			}
			switch a {
			case "-p":
				if _, err := strconv.ParseUint(v, 10, 16); err != nil {
					return o, fmt.Errorf("-p %q: not a port", v)
				}
				o.port = v
			case "-t":
				t, ok := dns.StringToType[strings.ToUpper(v)]
				if !ok {
					return o, fmt.Errorf("-t %q: unknown type", v)
				}
				o.qtype, typeSet = t, true
			case "-x":
				rev, err := dns.ReverseAddr(v)
				if err != nil {
					return o, fmt.Errorf("-x %q: %w", v, err)
				}
				o.name, o.qtype, typeSet = rev, dns.TypePTR, true
			}
		case strings.HasPrefix(a, "-"):
			return o, fmt.Errorf("option %s is not supported by this stand-in", a)
		default:
			// As dig: a word that reads as a type (or class) is one, until
			// one is given; anything else is the name.
			if t, ok := dns.StringToType[strings.ToUpper(a)]; ok && !typeSet {
				o.qtype, typeSet = t, true
			} else if strings.EqualFold(a, "IN") && !classSet {
				classSet = true
			} else if o.name == "" {
				o.name = a
			} else {
				return o, fmt.Errorf("%q: this stand-in makes one query per run (name %q given)", a, o.name)
			}
		}
	}
	if o.name == "" {
		return o, errors.New("no name to look up")
	}
	if o.all && !o.short {
		return o, errors.New("this stand-in prints only the answer section: give +noall +answer, or +short")
	}
	return o, nil
}

// plus applies one +option.
func (o *options) plus(opt string) error {
	name, val, hasVal := strings.Cut(opt, "=")
	on := !strings.HasPrefix(name, "no")
	if !on {
		name = name[2:]
	}
	num := func() (int, error) {
		n, err := strconv.Atoi(val)
		if !hasVal || !on || err != nil || n < 0 {
			return 0, fmt.Errorf("+%s: want +%s=N", opt, name)
		}
		return n, nil
	}
	switch name {
	case "tcp", "vc":
		o.tcp = on
	case "search", "defname":
		o.search = on
	case "all":
		o.all, o.answer = on, on
	case "answer":
		o.answer = on
	case "short":
		o.short = on
		if on {
			o.all = false
		}
	case "time":
		n, err := num()
		if err != nil {
			return err
		}
		o.timeout = time.Duration(max(n, 1)) * time.Second
	case "tries":
		n, err := num()
		if err != nil {
			return err
		}
		o.tries = max(n, 1)
	case "ndots":
		n, err := num()
		if err != nil {
			return err
		}
		o.ndots = n
	default:
		return fmt.Errorf("+%s is not supported by this stand-in", opt)
	}
	return nil
}

func run(o options, resolvConf string, stdout, stderr io.Writer) int {
	cfg, err := resolver.Load(resolvConf)
	if err != nil && o.server == "" {
		fmt.Fprintln(stderr, "dig:", err)
		return 10
	}
	if err != nil {
		cfg = resolver.Config{Ndots: 1}
	}
	if o.ndots >= 0 {
		cfg.Ndots = o.ndots
	}
	client := resolver.Client{TCP: o.tcp, Timeout: o.timeout, Tries: o.tries}
	if o.server != "" {
		client.Servers = []string{net.JoinHostPort(o.server, o.port)}
	} else {
		for _, s := range cfg.Servers {
			host, _, _ := net.SplitHostPort(s)
			client.Servers = append(client.Servers, net.JoinHostPort(host, o.port))
		}
	}
	var r *dns.Msg
	for _, name := range candidates(o.name, o.search, cfg) {
		q := new(dns.Msg)
		q.SetQuestion(name, o.qtype)
		q.RecursionDesired = true
		if r, err = client.Exchange(q); err != nil {
			fmt.Fprintf(stdout, ";; communications error: %v\n", err)
			return 9
		}
		if r.Rcode != dns.RcodeNameError {
			break
		}
	}
	for _, rr := range r.Answer {
		if o.short {
			fmt.Fprintln(stdout, rdata(rr))
		} else if o.answer {
			fmt.Fprintln(stdout, format(rr))
		}
	}
	return 0
}

// candidates are the names +search tries, in dig's order (dighost.c:
// a relative name with fewer dots than ndots goes through the search
// list first and is tried as it is last; any other only as it is).
func candidates(name string, search bool, cfg resolver.Config) []string {
	if !search || resolver.Absolute(name) || resolver.Dots(name) >= cfg.Ndots {
		return []string{resolver.Join(name, "")}
	}
	var out []string
	for _, d := range cfg.Search {
		out = append(out, resolver.Join(name, d))
	}
	return append(out, resolver.Join(name, ""))
}

// dig's columns: the TTL at 24, the class at 32, the type at 40 and the
// data at 48, with 8-wide tabs (dig.c's dns_master_stylecreate call).
var columns = [4]int{24, 32, 40, 48}

const tabWidth = 8

// format is rr as dig prints an answer line: each field indented to its
// column as BIND's masterdump.c indent() does it, with tabs to the last tab
// stop not past the column and spaces after; a field already at or past its
// column is one space (or a tab that reaches a stop) after the previous.
func format(rr dns.RR) string {
	h := rr.Header()
	var b strings.Builder
	b.WriteString(h.Name)
	col := len(h.Name)
	for i, f := range []string{strconv.FormatUint(uint64(h.Ttl), 10), dns.Class(h.Class).String(), dns.Type(h.Rrtype).String(), rdata(rr)} {
		col = indent(&b, col, columns[i])
		b.WriteString(f)
		col += len(f)
	}
	return b.String()
}

// indent writes the whitespace from column from to column to and returns
// the column reached.
func indent(b *strings.Builder, from, to int) int {
	if to < from+1 {
		to = from + 1
	}
	if tabs := to/tabWidth - from/tabWidth; tabs > 0 {
		b.WriteString(strings.Repeat("\t", tabs))
		from = to / tabWidth * tabWidth
	}
	b.WriteString(strings.Repeat(" ", to-from))
	return to
}

// rdata is rr's data in presentation format (what +short prints).
func rdata(rr dns.RR) string {
	return strings.TrimPrefix(rr.String(), rr.Header().String())
}
