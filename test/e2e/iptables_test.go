package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/harness"
)

// The kubelet's iptables utility chains (makeIPTablesUtilChains, true by
// default), in the node's own network namespace (never the machine's):
// KUBE-IPTABLES-HINT in mangle, KUBE-FIREWALL jumped to first from INPUT
// and OUTPUT with the localnet drop rule (IPv4 only), and the
// KUBE-KUBELET-CANARY chains in mangle, nat and filter, for both families.
// A flush of the tables (the canaries and the kubelet's chains gone, as a
// firewall reload leaves them) has hostlet make them again at its next
// look at the canary (the kubelet's minute).
func TestIPTablesUtilChains(t *testing.T) {
	skipIfNoCluster(t)
	const name = "hostlet-iptables"
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c, err := harness.Start(ctx, harness.Options{Logf: t.Logf, NodeNetns: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	h, err := c.StartHostlet(ctx, harness.HostletOptions{Binary: hostletBinary(t), NodeName: name})
	if err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	t.Cleanup(h.Stop)

	inNetns := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + c.NodeNetnsPath()}, args...)...).CombinedOutput()
		return string(out), err
	}
	// want is, per save command, the lines its output must have (a
	// "-A INPUT" line also the first of its chain).
	want := map[string][]string{
		"iptables-save": {
			":KUBE-IPTABLES-HINT - [0:0]",
			":KUBE-FIREWALL - [0:0]",
			"-A INPUT -j KUBE-FIREWALL",
			"-A OUTPUT -j KUBE-FIREWALL",
			`-A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment "block incoming localnet connections" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`,
		},
		"ip6tables-save": {":KUBE-IPTABLES-HINT - [0:0]"},
	}
	// missing says what is not (yet) there, empty when all is.
	missing := func() []string {
		var out []string
		for cmd, lines := range want {
			save, err := inNetns(cmd)
			if err != nil {
				out = append(out, cmd+": "+err.Error()+": "+save)
				continue
			}
			tables := map[string]string{}
			var table string
			for _, l := range strings.Split(save, "\n") {
				if strings.HasPrefix(l, "*") {
					table = l[1:]
				}
				tables[table] += l + "\n"
			}
			for _, l := range lines {
				if !strings.Contains(save, l+"\n") {
					out = append(out, cmd+": "+l)
				}
			}
			for _, table := range []string{"mangle", "nat", "filter"} {
				if !strings.Contains(tables[table], ":KUBE-KUBELET-CANARY - ") {
					out = append(out, cmd+": "+table+" has no KUBE-KUBELET-CANARY")
				}
			}
			if !strings.Contains(tables["mangle"], ":KUBE-IPTABLES-HINT ") {
				out = append(out, cmd+": the hint chain is not in mangle")
			}
			if cmd == "iptables-save" {
				for _, chain := range []string{"INPUT", "OUTPUT"} {
					var first string
					for _, l := range strings.Split(tables["filter"], "\n") {
						if strings.HasPrefix(l, "-A "+chain+" ") {
							first = l
							break
						}
					}
					if first != "-A "+chain+" -j KUBE-FIREWALL" {
						out = append(out, cmd+": "+chain+"'s first rule is "+first)
					}
				}
			}
		}
		return out
	}
	waitAll := func(within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			m := missing()
			if len(m) == 0 {
				return
			}
			if time.Now().After(deadline) {
				save, _ := inNetns("iptables-save")
				t.Fatalf("after %v still missing:\n  %s\niptables-save:\n%s", within, strings.Join(m, "\n  "), save)
			}
			time.Sleep(time.Second)
		}
	}
	// The canaries follow the chains at once; the first round is done
	// before the node has been Ready long.
	waitAll(30 * time.Second)

	// A flush as a firewall's reload does it: every rule and the
	// non-built-in chains gone, in every table of both families.
	for _, cmd := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"mangle", "nat", "filter"} {
			for _, op := range []string{"-F", "-X"} {
				if out, err := inNetns(cmd, "-t", table, op); err != nil {
					t.Fatalf("%s -t %s %s: %v: %s", cmd, table, op, err, out)
				}
			}
		}
	}
	if len(missing()) == 0 {
		t.Fatal("the flush left the chains")
	}
	// The canary is looked at every minute: back within two.
	waitAll(2*time.Minute + 10*time.Second)
}
