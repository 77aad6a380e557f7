package iptables

import (
	"context"
	"errors"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	goiptables "github.com/coreos/go-iptables/iptables"
)

// fakeTables is one family's tables in memory: chain → rules (each rule
// its args joined by spaces), per table, with iptables' exit statuses.
type fakeTables struct {
	mu     sync.Mutex
	proto  goiptables.Protocol
	tables map[string]map[string][]string
}

func newFake(proto goiptables.Protocol) *fakeTables {
	builtin := func(chains ...string) map[string][]string {
		m := map[string][]string{}
		for _, c := range chains {
			m[c] = nil
		}
		return m
	}
	return &fakeTables{proto: proto, tables: map[string]map[string][]string{
		"filter": builtin("INPUT", "FORWARD", "OUTPUT"),
		"nat":    builtin("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"),
		"mangle": builtin("PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"),
	}}
}

// exitError is an iptables failure with the given exit status, as
// go-iptables returns it (a real process's, so ExitStatus reads it).
func exitError(t testing.TB, status int) error {
	err := exec.Command("sh", "-c", "exit "+string(rune('0'+status))).Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("sh exit %d: %v", status, err)
	}
	return &goiptables.Error{ExitError: *ee}
}

var exit1, exit4 error

func (f *fakeTables) Proto() goiptables.Protocol { return f.proto }

func (f *fakeTables) ChainExists(table, chain string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.tables[table][chain]
	return ok, nil
}

func (f *fakeTables) NewChain(table, chain string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.tables[table][chain]; ok {
		return exit1
	}
	f.tables[table][chain] = nil
	return nil
}

func (f *fakeTables) Exists(table, chain string, rule ...string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules, ok := f.tables[table][chain]
	if !ok {
		return false, exit1
	}
	for _, r := range rules {
		if r == strings.Join(rule, " ") {
			return true, nil
		}
	}
	return false, nil
}

func (f *fakeTables) Insert(table, chain string, pos int, rule ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	rules := f.tables[table][chain]
	f.tables[table][chain] = append(append(append([]string(nil), rules[:pos-1]...), strings.Join(rule, " ")), rules[pos-1:]...)
	return nil
}

func (f *fakeTables) Append(table, chain string, rule ...string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tables[table][chain] = append(f.tables[table][chain], strings.Join(rule, " "))
	return nil
}

// flush is iptables -F and -X in every table: the built-in chains emptied,
// the others gone (a firewall's reload).
func (f *fakeTables) flush() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, chains := range f.tables {
		for c := range chains {
			if strings.ToUpper(c) == c && !strings.HasPrefix(c, "KUBE-") {
				chains[c] = nil
			} else {
				delete(chains, c)
			}
		}
	}
}

func (f *fakeTables) rules(table, chain string) ([]string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r, ok := f.tables[table][chain]
	return append([]string(nil), r...), ok
}

func setup(t *testing.T) {
	if exit1 == nil {
		exit1, exit4 = exitError(t, 1), exitError(t, 4)
	}
}

const localnet = "-m comment --comment block incoming localnet connections --dst 127.0.0.0/8 ! --src 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP"

// IPv4 gets the hint chain, KUBE-FIREWALL with its one localnet rule and
// the jumps to it first in INPUT and OUTPUT (before rules already there),
// each once however many times Sync runs.
func TestSyncIPv4(t *testing.T) {
	setup(t)
	f := newFake(goiptables.ProtocolIPv4)
	_ = f.Append("filter", "INPUT", "-j", "ACCEPT")
	for i := 0; i < 2; i++ {
		if !Sync(f) {
			t.Fatal("Sync failed")
		}
	}
	if _, ok := f.rules("mangle", HintChain); !ok {
		t.Error("no KUBE-IPTABLES-HINT in mangle")
	}
	if got, _ := f.rules("filter", FirewallChain); !reflect.DeepEqual(got, []string{localnet}) {
		t.Errorf("KUBE-FIREWALL = %q, want the localnet rule once", got)
	}
	if got, _ := f.rules("filter", "INPUT"); !reflect.DeepEqual(got, []string{"-j KUBE-FIREWALL", "-j ACCEPT"}) {
		t.Errorf("INPUT = %q, want the jump first, once", got)
	}
	if got, _ := f.rules("filter", "OUTPUT"); !reflect.DeepEqual(got, []string{"-j KUBE-FIREWALL"}) {
		t.Errorf("OUTPUT = %q", got)
	}
}

// IPv6 has no route_localnet: the hint chain only.
func TestSyncIPv6(t *testing.T) {
	setup(t)
	f := newFake(goiptables.ProtocolIPv6)
	if !Sync(f) {
		t.Fatal("Sync failed")
	}
	if _, ok := f.rules("mangle", HintChain); !ok {
		t.Error("no KUBE-IPTABLES-HINT in mangle")
	}
	if _, ok := f.rules("filter", FirewallChain); ok {
		t.Error("KUBE-FIREWALL made for IPv6")
	}
	if got, _ := f.rules("filter", "INPUT"); len(got) != 0 {
		t.Errorf("INPUT = %q, want nothing", got)
	}
}

// failingTables fails NewChain with another status than 1 (no mangle
// table, say): Sync reports it rather than taking it for "exists".
type failingTables struct{ *fakeTables }

func (f failingTables) NewChain(string, string) error { return exit4 }

func TestSyncFails(t *testing.T) {
	setup(t)
	if Sync(failingTables{newFake(goiptables.ProtocolIPv4)}) {
		t.Error("Sync succeeded with NewChain failing")
	}
}

// Run makes the canaries in mangle, nat and filter; a flush of the tables
// has the kubelet's chains and the canaries made again.
func TestRunRemakesAfterFlush(t *testing.T) {
	setup(t)
	defer func(m, p, to time.Duration) { monitorInterval, flushPoll, flushTimeout = m, p, to }(monitorInterval, flushPoll, flushTimeout)
	monitorInterval, flushPoll, flushTimeout = 10*time.Millisecond, time.Millisecond, time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	v4, v6 := newFake(goiptables.ProtocolIPv4), newFake(goiptables.ProtocolIPv6)
	Run(ctx, []Tables{v4, v6})
	waitFor := func(f *fakeTables, table, chain string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			if _, ok := f.rules(table, chain); ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s %s never made", table, chain)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for _, f := range []*fakeTables{v4, v6} {
		for _, table := range canaryTables {
			waitFor(f, table, CanaryChain)
		}
	}
	v4.flush()
	if _, ok := v4.rules("filter", FirewallChain); ok {
		t.Fatal("flush left KUBE-FIREWALL")
	}
	waitFor(v4, "filter", FirewallChain)
	waitFor(v4, "mangle", HintChain)
	for _, table := range canaryTables {
		waitFor(v4, table, CanaryChain)
	}
	if got, _ := v4.rules("filter", "INPUT"); !reflect.DeepEqual(got, []string{"-j KUBE-FIREWALL"}) {
		t.Errorf("INPUT after the reload = %q", got)
	}
}

// Without iptables nothing is made and nothing fails.
func TestRunNoFamilies(t *testing.T) {
	Run(context.Background(), nil)
}
