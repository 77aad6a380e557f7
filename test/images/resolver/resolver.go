// Package resolver is the stub resolver of the conformance images' dig and
// getent stand-ins (test/images/cmd/dig, test/images/cmd/getent): the
// pod's resolv.conf, the names a search list makes of a name, and one query
// sent to the nameservers in turn. Which names are tried in which order
// differs between BIND's dig and glibc, so each command orders them itself.
package resolver

import (
	"errors"
	"net"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// ResolvConf is where a pod's resolver configuration is.
const ResolvConf = "/etc/resolv.conf"

// Config is what the stand-ins read from resolv.conf.
type Config struct {
	Servers []string // host:port, in resolv.conf's order
	Search  []string // search domains, without the trailing dot
	Ndots   int
}

// Load reads a resolv.conf (nameserver, search or domain, options ndots).
func Load(path string) (Config, error) {
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return Config{}, err
	}
	c := Config{Ndots: cc.Ndots}
	for _, s := range cc.Servers {
		c.Servers = append(c.Servers, net.JoinHostPort(s, cc.Port))
	}
	for _, d := range cc.Search {
		if d = strings.TrimSuffix(d, "."); d != "" {
			c.Search = append(c.Search, d)
		}
	}
	return c, nil
}

// Dots counts the dots of name as both dig and glibc do: all of them,
// a trailing one included.
func Dots(name string) int { return strings.Count(name, ".") }

// Absolute says whether name ends with a dot (no search list applies).
func Absolute(name string) bool { return strings.HasSuffix(name, ".") }

// Join is name in domain as a fully qualified name; domain "" is the name
// as it is.
func Join(name, domain string) string {
	if domain == "" {
		return dns.Fqdn(name)
	}
	return dns.Fqdn(strings.TrimSuffix(name, ".") + "." + domain)
}

// Client sends queries.
type Client struct {
	Servers []string // host:port, tried in order
	TCP     bool     // TCP from the start (dig +tcp); over UDP a truncated answer is asked again over TCP
	Timeout time.Duration
	Tries   int // attempts per server
}

// ErrNoReply is what Exchange returns when no server answered.
var ErrNoReply = errors.New("no servers could be reached")

// Exchange asks q of the servers in turn until one answers, whatever its
// rcode: both dig (+fail, its default) and a stub resolver stop at the
// first answer of a server; only silence or a refused connection moves on.
func (c Client) Exchange(q *dns.Msg) (*dns.Msg, error) {
	tries := max(c.Tries, 1)
	var last error
	for _, s := range c.Servers {
		for range tries {
			r, err := c.exchange(q, s, c.TCP)
			if err == nil && r.Truncated && !c.TCP {
				r, err = c.exchange(q, s, true)
			}
			if err == nil {
				return r, nil
			}
			last = err
			var op *net.OpError
			if errors.As(err, &op) && !op.Timeout() {
				break // refused: this server is not there, no use trying it again
			}
		}
	}
	if last == nil {
		return nil, ErrNoReply
	}
	return nil, errors.Join(ErrNoReply, last)
}

func (c Client) exchange(q *dns.Msg, server string, tcp bool) (*dns.Msg, error) {
	cl := &dns.Client{Net: "udp", Timeout: c.Timeout}
	if tcp {
		cl.Net = "tcp"
	}
	r, _, err := cl.Exchange(q, server)
	return r, err
}
