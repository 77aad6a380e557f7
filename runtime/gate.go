package runtime

import (
	"context"
	goruntime "runtime"
)

// gate bounds how many of the CPU-bound container steps run at once: a
// task's creation and start (a shim and three runc processes) and its
// deletion (runc delete, the shim's exit). Run all together, the thirty
// containers of a burst share the CPUs and all reach Running near the end
// of it; in turn (FIFO: blocked channel senders are woken in order) the
// first are Running after a fraction of it and the last no later. Only
// local, bounded steps pass it: image pulls, hooks, CNI plugins and waits
// for an exit never hold it.
type gate chan struct{}

// newGate lets two steps per CPU pass: a creation spends about half its
// time waiting (the shim's start, runc init's handshake with runc create,
// containerd's metadata writes). With one per CPU the CPUs idled a quarter
// of a 100-pod burst once its sandboxes were made (bench, 2 CPUs: busy
// 75-79% after the first 6 s; 83-85% in four of five runs with two or
// three per CPU, and all Running 12% sooner on average).
func newGate() gate {
	return make(gate, 2*cpus())
}

// cpus is the node's CPUs, at least 2.
func cpus() int { return max(goruntime.NumCPU(), 2) }

// enter waits for a place; it fails only when ctx ends first.
func (g gate) enter(ctx context.Context) error {
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g gate) leave() { <-g }
