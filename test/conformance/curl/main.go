// Command curl is the small static stand-in for curl in the conformance
// agnhost image: upstream agnhost is Alpine-based and the e2e lifecycle hook
// tests run `sh -c "curl http://HOST:8080/echo?msg=..."` inside it. It
// supports the curl flags the e2e sources use:
//
//	curl [-sSfkILigq] [-X METHOD] [-H HEADER]... [-d DATA] [-o FILE] [-w FORMAT]
//	     [-m SECONDS] [--connect-timeout SECONDS] [--interface IP] URL
//
// -g (no URL globbing) and -q (no curlrc) are what it does anyway.
//
// Exit codes follow curl's where it matters to a caller: 0 success, 2 bad
// usage, 7 failed to connect, 22 HTTP error with -f, 28 timeout.
package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

type options struct {
	silent, showError, fail, insecure, head, follow, include bool
	method, data, output, writeOut, iface                    string
	headers                                                  []string
	maxTime, connectTimeout                                  time.Duration
	url                                                      string
}

func main() {
	o, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "curl:", err)
		os.Exit(2)
	}
	os.Exit(run(o))
}

// parse reads curl's flags, including combined short flags (-sIk) and
// attached values (-XGET, --header=...).
func parse(args []string) (options, error) {
	var o options
	// takes returns the value of a flag that needs one.
	takes := func(i *int, name, attached string) (string, error) {
		if attached != "" {
			return attached, nil
		}
		if *i+1 >= len(args) {
			return "", fmt.Errorf("option %s: requires a value", name)
		}
		*i++
		return args[*i], nil
	}
	seconds := func(v string) (time.Duration, error) {
		f, err := strconv.ParseFloat(v, 64)
		return time.Duration(f * float64(time.Second)), err
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if strings.HasPrefix(a, "--") {
			name, val, _ := strings.Cut(a, "=")
			var err error
			switch name {
			case "--silent":
				o.silent = true
			case "--show-error":
				o.showError = true
			case "--fail":
				o.fail = true
			case "--insecure":
				o.insecure = true
			case "--head":
				o.head = true
			case "--location":
				o.follow = true
			case "--include":
				o.include = true
			case "--globoff", "--disable":
			case "--interface":
				o.iface, err = takes(&i, name, val)
			case "--request":
				o.method, err = takes(&i, name, val)
			case "--header":
				var h string
				h, err = takes(&i, name, val)
				o.headers = append(o.headers, h)
			case "--data", "--data-raw", "--data-binary":
				o.data, err = takes(&i, name, val)
			case "--output":
				o.output, err = takes(&i, name, val)
			case "--write-out":
				o.writeOut, err = takes(&i, name, val)
			case "--max-time", "--connect-timeout":
				var v string
				var d time.Duration
				if v, err = takes(&i, name, val); err == nil {
					d, err = seconds(v)
				}
				if name == "--max-time" {
					o.maxTime = d
				} else {
					o.connectTimeout = d
				}
			default:
				return o, fmt.Errorf("option %s: is unknown", name)
			}
			if err != nil {
				return o, err
			}
			continue
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if o.url != "" {
				return o, errors.New("only one URL is supported")
			}
			o.url = a
			continue
		}
		// A run of short flags; one taking a value ends the run.
		for j := 1; j < len(a); j++ {
			rest := a[j+1:]
			var err error
			var v string
			switch c := a[j]; c {
			case 's':
				o.silent = true
			case 'S':
				o.showError = true
			case 'f':
				o.fail = true
			case 'k':
				o.insecure = true
			case 'I':
				o.head = true
			case 'L':
				o.follow = true
			case 'i':
				o.include = true
			case 'g', 'q':
			case 'X', 'H', 'd', 'o', 'w', 'm':
				if v, err = takes(&i, "-"+string(c), rest); err != nil {
					return o, err
				}
				switch c {
				case 'X':
					o.method = v
				case 'H':
					o.headers = append(o.headers, v)
				case 'd':
					o.data = v
				case 'o':
					o.output = v
				case 'w':
					o.writeOut = v
				case 'm':
					if o.maxTime, err = seconds(v); err != nil {
						return o, err
					}
				}
				j = len(a)
			default:
				return o, fmt.Errorf("option -%c: is unknown", c)
			}
		}
	}
	if o.url == "" {
		return o, errors.New("no URL specified")
	}
	if !strings.Contains(o.url, "://") {
		o.url = "http://" + o.url
	}
	return o, nil
}

func run(o options) int {
	method := o.method
	var body io.Reader
	if o.data != "" {
		body = strings.NewReader(o.data)
		if method == "" {
			method = http.MethodPost
		}
	}
	if method == "" {
		method = http.MethodGet
		if o.head {
			method = http.MethodHead
		}
	}
	req, err := http.NewRequest(method, o.url, body)
	if err != nil {
		return o.failWith(3, err)
	}
	for _, h := range o.headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	if o.data != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	dialer := &net.Dialer{Timeout: o.connectTimeout}
	if o.iface != "" {
		// An address, as the e2e sources pass it (curl also takes a name).
		ip := net.ParseIP(o.iface)
		if ip == nil {
			return o.failWith(45, fmt.Errorf("--interface %q: only an IP address is supported", o.iface))
		}
		dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	tr := &http.Transport{
		DialContext:     dialer.DialContext,
		TLSClientConfig: &tls.Config{InsecureSkipVerify: o.insecure},
	}
	client := &http.Client{Transport: tr, Timeout: o.maxTime}
	if !o.follow {
		client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	resp, err := client.Do(req)
	if err != nil {
		code := 7
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			code = 28
		}
		return o.failWith(code, err)
	}
	defer resp.Body.Close()

	out := io.Writer(os.Stdout)
	if o.output != "" && o.output != "-" {
		f, err := os.Create(o.output)
		if err != nil {
			return o.failWith(23, err)
		}
		defer f.Close()
		out = f
	}
	if o.fail && resp.StatusCode >= 400 {
		return o.failWith(22, fmt.Errorf("the requested URL returned error: %d", resp.StatusCode))
	}
	if o.head || o.include {
		fmt.Fprintf(out, "%s %s\r\n", resp.Proto, resp.Status)
		resp.Header.Write(out)
		fmt.Fprint(out, "\r\n")
	}
	if !o.head {
		if _, err := io.Copy(out, resp.Body); err != nil {
			return o.failWith(56, err)
		}
	}
	if o.writeOut != "" {
		w := strings.NewReplacer(`%{http_code}`, fmt.Sprintf("%03d", resp.StatusCode), `%{response_code}`,
			fmt.Sprintf("%03d", resp.StatusCode), `\n`, "\n").Replace(o.writeOut)
		fmt.Print(w)
	}
	return 0
}

// failWith reports err the way curl does (quiet under -s unless -S) and
// returns code.
func (o options) failWith(code int, err error) int {
	if !o.silent || o.showError {
		fmt.Fprintf(os.Stderr, "curl: (%d) %v\n", code, err)
	}
	return code
}
