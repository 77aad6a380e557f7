// Package iptables makes the kubelet's iptables utility chains
// (makeIPTablesUtilChains, true by default), as the kubelet v1.35's
// initNetworkUtil does: for each family the host's iptables answers for,
// KUBE-IPTABLES-HINT in mangle (which tells other components whether the
// node uses iptables-legacy or iptables-nft), and for IPv4 KUBE-FIREWALL in
// filter, jumped to first from INPUT and OUTPUT, with its rule dropping
// connections to 127.0.0.0/8 from elsewhere (the mitigation of
// route_localnet, issue 90259, that kube-proxy and others rely on the
// kubelet for). The KUBE-KUBELET-CANARY chains in mangle, nat and filter
// tell when something flushed the tables (a firewall reload): then the
// chains are made again.
//
// hostlet itself needs none of them: they are for the other components of
// the node, so a host without iptables is only logged, as the kubelet's.
package iptables

import (
	"context"
	"errors"
	"time"

	goiptables "github.com/coreos/go-iptables/iptables"
	log "github.com/sirupsen/logrus"
)

// The kubelet's chains and tables.
const (
	HintChain     = "KUBE-IPTABLES-HINT"
	FirewallChain = "KUBE-FIREWALL"
	CanaryChain   = "KUBE-KUBELET-CANARY"

	tableMangle = "mangle"
	tableNAT    = "nat"
	tableFilter = "filter"
)

// localnetRule is KUBE-FIREWALL's rule, exactly the kubelet's (kube-proxy
// in iptables mode makes an identical one: a rule spelled differently
// would be a second rule, not the same one found).
var localnetRule = []string{
	"-m", "comment", "--comment", "block incoming localnet connections",
	"--dst", "127.0.0.0/8",
	"!", "--src", "127.0.0.0/8",
	"-m", "conntrack",
	"!", "--ctstate", "RELATED,ESTABLISHED,DNAT",
	"-j", "DROP",
}

// canaryTables are where the canary chain is made; the first is the one
// watched, the others waited for once it is gone (the kubelet's order).
var canaryTables = []string{tableMangle, tableNAT, tableFilter}

// Tables is what is used of one family's iptables (go-iptables'
// *IPTables, which runs the iptables or ip6tables binary as the kubelet's
// util/iptables does); a fake in tests.
type Tables interface {
	ChainExists(table, chain string) (bool, error)
	NewChain(table, chain string) error
	Exists(table, chain string, rulespec ...string) (bool, error)
	Insert(table, chain string, pos int, rulespec ...string) error
	Append(table, chain string, rulespec ...string) error
	Proto() goiptables.Protocol
}

// The kubelet's intervals: the canary is looked at every minute (iptables
// tells no one of a flush, so it can only be looked at, as the kubelet
// does), and once it is gone the other tables' canaries are waited for
// every 100ms for up to 5s, so a flush still under way is not raced.
var (
	monitorInterval = time.Minute
	flushPoll       = 100 * time.Millisecond
	flushTimeout    = 5 * time.Second
)

// exitResourceProblem is iptables' exit status when it could not do its
// work (the xtables lock held past --wait, out of memory): the chain's
// existence is unknown then, not denied.
const exitResourceProblem = 4

// Present returns the families whose iptables works on this host: the
// binary is there and lists nat's POSTROUTING (the kubelet's Present), an
// IPv4 one first. None on a host with nftables only.
func Present() []Tables {
	var out []Tables
	for _, proto := range []goiptables.Protocol{goiptables.ProtocolIPv4, goiptables.ProtocolIPv6} {
		// --wait 5 as the kubelet's -w 5: another writer holding the
		// xtables lock is waited for, not failed on.
		ipt, err := goiptables.New(goiptables.IPFamily(proto), goiptables.Timeout(5))
		if err != nil {
			continue
		}
		if ok, err := ipt.ChainExists(tableNAT, "POSTROUTING"); err != nil || !ok {
			continue
		}
		out = append(out, ipt)
	}
	return out
}

// Run makes the chains in each of families (Present's) and keeps them
// until ctx ends, logging as the kubelet does. It returns once the first
// round is done in every family, the canaries watched in the background.
func Run(ctx context.Context, families []Tables) {
	if len(families) == 0 {
		// Not an error, as the kubelet's: nothing hostlet does needs them,
		// and a host with nftables only has no component that would.
		log.Info("No iptables support on this system; not creating the KUBE-IPTABLES-HINT chain")
		return
	}
	for _, t := range families {
		if !Sync(t) {
			log.WithField("protocol", protocol(t)).Info("Failed to initialize iptables rules; some functionality may be missing.")
			continue
		}
		log.WithField("protocol", protocol(t)).Info("Initialized iptables rules.")
		go monitor(ctx, t, func() { Sync(t) })
	}
}

// Sync makes the hint chain and, for IPv4, the firewall chain with its
// jumps and rule, each unless it is there already (the kubelet's
// syncIPTablesRules); false after the first failure, logged.
func Sync(t Tables) bool {
	if _, err := ensureChain(t, tableMangle, HintChain); err != nil {
		log.WithError(err).Error("Failed to ensure that iptables hint chain exists")
		return false
	}
	if t.Proto() == goiptables.ProtocolIPv6 {
		// IPv6 has no route_localnet: nothing to protect.
		return true
	}
	if _, err := ensureChain(t, tableFilter, FirewallChain); err != nil {
		log.WithError(err).Error("Failed to ensure that filter table KUBE-FIREWALL chain exists")
		return false
	}
	if err := ensureRule(t, true, tableFilter, "OUTPUT", "-j", FirewallChain); err != nil {
		log.WithError(err).Error("Failed to ensure that OUTPUT chain jumps to KUBE-FIREWALL")
		return false
	}
	if err := ensureRule(t, true, tableFilter, "INPUT", "-j", FirewallChain); err != nil {
		log.WithError(err).Error("Failed to ensure that INPUT chain jumps to KUBE-FIREWALL")
		return false
	}
	if err := ensureRule(t, false, tableFilter, FirewallChain, localnetRule...); err != nil {
		log.WithError(err).Error("Failed to ensure rule to drop invalid localhost packets in filter table KUBE-FIREWALL chain")
		return false
	}
	return true
}

// ensureChain makes chain in table; existed says it was there already
// (iptables -N's exit status 1, as the kubelet's EnsureChain reads it).
func ensureChain(t Tables, table, chain string) (existed bool, err error) {
	err = t.NewChain(table, chain)
	var ie *goiptables.Error
	if errors.As(err, &ie) && ie.ExitStatus() == 1 {
		return true, nil
	}
	return false, err
}

// ensureRule adds the rule unless chain has it: first in the chain
// (prepend) or last.
func ensureRule(t Tables, prepend bool, table, chain string, rule ...string) error {
	ok, err := t.Exists(table, chain, rule...)
	if err != nil || ok {
		return err
	}
	if prepend {
		return t.Insert(table, chain, 1, rule...)
	}
	return t.Append(table, chain, rule...)
}

// monitor is the kubelet's iptables Monitor: the canary chain made in each
// of canaryTables (retried every interval until it is), then looked for in
// the first every interval; once it is gone (and the others with it, or
// after flushTimeout) the tables were flushed, and reload makes the
// kubelet's chains again before the canaries are made anew. Until ctx
// ends; the canaries stay then, as the kubelet's (whose monitor never
// stops).
func monitor(ctx context.Context, t Tables, reload func()) {
	l := log.WithField("protocol", protocol(t))
	for {
		if !every(ctx, monitorInterval, true, func() bool {
			for _, table := range canaryTables {
				if _, err := ensureChain(t, table, CanaryChain); err != nil {
					l.WithError(err).WithFields(log.Fields{"table": table, "chain": CanaryChain}).Error("Could not set up iptables canary")
					return false
				}
			}
			return true
		}) {
			return
		}
		if !every(ctx, monitorInterval, false, func() bool {
			exists, err := t.ChainExists(canaryTables[0], CanaryChain)
			if exists {
				return false
			}
			if resourceError(err) {
				l.WithError(err).WithFields(log.Fields{"table": canaryTables[0], "chain": CanaryChain}).Error("Could not check for iptables canary")
				return false
			}
			l.WithFields(log.Fields{"table": canaryTables[0], "chain": CanaryChain}).Debug("IPTables canary deleted")
			if !othersGone(ctx, t) {
				l.Info("Inconsistent iptables state detected")
			}
			return true
		}) || ctx.Err() != nil {
			return
		}
		l.Debug("Reloading after iptables flush")
		reload()
	}
}

// othersGone waits for the canaries of the other tables to be gone too,
// every flushPoll for up to flushTimeout: false if one stayed.
func othersGone(ctx context.Context, t Tables) bool {
	ctx, cancel := context.WithTimeout(ctx, flushTimeout)
	defer cancel()
	return every(ctx, flushPoll, true, func() bool {
		for _, table := range canaryTables[1:] {
			if exists, err := t.ChainExists(table, CanaryChain); exists || resourceError(err) {
				return false
			}
		}
		return true
	})
}

// every runs cond every interval (first at once when immediate) until it
// returns true (then true) or ctx ends (false).
func every(ctx context.Context, interval time.Duration, immediate bool, cond func() bool) bool {
	if ctx.Err() != nil {
		return false
	}
	if immediate && cond() {
		return true
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
			if cond() {
				return true
			}
		}
	}
}

func resourceError(err error) bool {
	var ie *goiptables.Error
	return errors.As(err, &ie) && ie.ExitStatus() == exitResourceProblem
}

func protocol(t Tables) string {
	if t.Proto() == goiptables.ProtocolIPv6 {
		return "IPv6"
	}
	return "IPv4"
}
