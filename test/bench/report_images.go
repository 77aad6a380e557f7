package main

import (
	"fmt"
	"strings"
	"time"
)

// pull is a node's case i of the images scenario (zero if none).
func (r *nodeResult) pull(i int) pullCase {
	if i < len(r.pulls) {
		return r.pulls[i]
	}
	return pullCase{}
}

func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/1e6) }

// imageRows compare the one case both nodes run: the normal pull on a
// fresh node (hostlet's first case, the kubelet's only one).
func imageRows(c config) []row {
	p := func(r *nodeResult) pullCase { return r.pull(0) }
	pre := fmt.Sprintf("images: %d pods of a %d MB image, normal pull on a fresh node", c.imagePods, c.imageMB)
	return []row{
		durRow(pre+": create → all Running", func(r *nodeResult) time.Duration { return p(r).allRunning }),
		durRow("images, normal pull: create → Running, p50", func(r *nodeResult) time.Duration { return p(r).start.pct(50) }),
		row{"images, normal pull: registry bytes served", func(r *nodeResult) float64 { return float64(p(r).served) },
			func(r *nodeResult) string { return mb(p(r).served) }, "fewer"},
	}
}

// imagesTable lists every case of the images scenario, hostlet's and the
// kubelet's, each against the kubelet's normal pull (the anchor).
func imagesTable(labels []string, res []*nodeResult) string {
	var anchor *pullCase
	for i, r := range res {
		if labels[i] == "kubelet" && len(r.pulls) > 0 {
			anchor = &r.pulls[0]
		}
	}
	var b strings.Builder
	for i, r := range res {
		for _, pc := range r.pulls {
			if b.Len() == 0 {
				b.WriteString("\nImage pulls (each case on nodes with none of the image; registry bytes as its blob log counted them while the case ran):\n\n" +
					"| node | case | nodes | pods Running | create → all Running | p50 | registry served (of the image's layers) | all Running ÷ kubelet's |\n|---|---|---|---|---|---|---|---|\n")
			}
			vs := ""
			if anchor != nil {
				_, vs = ratio(pc.allRunning.Seconds(), anchor.allRunning.Seconds(), "faster")
			}
			fmt.Fprintf(&b, "| %s | %s | %d | %d of %d | %s | %s | %s (%s) | %s |\n", labels[i], pc.name, pc.nodes, pc.running, pc.pods,
				ms(pc.allRunning), ms(pc.start.pct(50)), mb(pc.served), mb(pc.image), vs)
		}
	}
	return b.String()
}
