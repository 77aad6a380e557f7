// Package dnstest serves a small zone on loopback, over UDP and TCP on one
// port, for the tests of the dig and getent stand-ins.
package dnstest

import (
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/miekg/dns"
)

// Server answers from Records (owner name → records in presentation
// format); a name without records is NXDOMAIN, one with records of other
// types only NOERROR with no answer. Names in ServFail get SERVFAIL, and
// over UDP the names in Truncate get an empty truncated answer.
type Server struct {
	Addr     string // 127.0.0.1:port
	Records  map[string][]string
	ServFail map[string]bool
	Truncate map[string]bool

	mu      sync.Mutex
	queries []string
}

// Start serves s until the test ends.
func Start(t *testing.T, s *Server) *Server {
	t.Helper()
	var pc net.PacketConn
	var l net.Listener
	for range 20 { // the UDP port may be taken for TCP: try another
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if l, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("no port free for both UDP and TCP")
	}
	s.Addr = pc.LocalAddr().String()
	h := dns.HandlerFunc(s.serve)
	udp := &dns.Server{PacketConn: pc, Handler: h}
	tcp := &dns.Server{Listener: l, Handler: h}
	go udp.ActivateAndServe()
	go tcp.ActivateAndServe()
	t.Cleanup(func() {
		udp.Shutdown()
		tcp.Shutdown()
	})
	return s
}

// Queries are the questions asked so far, as "udp NAME TYPE".
func (s *Server) Queries() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.queries...)
}

func (s *Server) serve(w dns.ResponseWriter, q *dns.Msg) {
	qn, qt := q.Question[0].Name, q.Question[0].Qtype
	netw := w.RemoteAddr().Network()
	s.mu.Lock()
	s.queries = append(s.queries, netw+" "+qn+" "+dns.TypeToString[qt])
	s.mu.Unlock()
	r := new(dns.Msg)
	r.SetReply(q)
	recs, known := s.Records[strings.ToLower(qn)]
	switch {
	case s.ServFail[qn]:
		r.Rcode = dns.RcodeServerFailure
	case s.Truncate[qn] && netw == "udp":
		r.Truncated = true
	case !known:
		r.Rcode = dns.RcodeNameError
	default:
		for _, text := range recs {
			rr, err := dns.NewRR(text)
			if err != nil {
				panic(err)
			}
			if rr.Header().Rrtype == qt || rr.Header().Rrtype == dns.TypeCNAME {
				r.Answer = append(r.Answer, rr)
			}
		}
	}
	w.WriteMsg(r)
}
