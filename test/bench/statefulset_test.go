package main

import (
	"strings"
	"testing"
	"time"
)

// The statefulset rows are in the table only when the scenario ran, with
// the ratio of the two nodes; a node the scenario did not reach prints
// zeros, not a panic.
func TestStatefulSetRows(t *testing.T) {
	sc, err := parseScenarios("statefulset")
	if err != nil {
		t.Fatal(err)
	}
	h := &nodeResult{sts: &stsResult{allReady: 10 * time.Second, pvsGone: 15 * time.Second}}
	k := &nodeResult{sts: &stsResult{allReady: 20 * time.Second, pvsGone: 30 * time.Second}}
	tbl := table(config{stsReplicas: 20, scenarios: sc}, []string{"hostlet", "kubelet"}, []*nodeResult{h, k})
	for _, want := range []string{
		"| StatefulSet of 20: create → all Ready | 10.0 s | 20.0 s | 0.50 | 2.0× faster |",
		"| StatefulSet of 20: delete → all PVs deleted | 15.0 s | 30.0 s | 0.50 | 2.0× faster |",
	} {
		if !strings.Contains(tbl, want) {
			t.Errorf("table lacks %q:\n%s", want, tbl)
		}
	}
	if strings.Contains(tbl, "burst of") {
		t.Errorf("burst rows without the burst scenario:\n%s", tbl)
	}
	if tbl := table(config{stsReplicas: 20, scenarios: sc}, []string{"hostlet"}, []*nodeResult{{}}); !strings.Contains(tbl, "create → all Ready | 0 ms |") {
		t.Errorf("a node without the scenario's result:\n%s", tbl)
	}
}
