package join

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	watchtools "k8s.io/client-go/tools/watch"
	"k8s.io/utils/clock"
)

// journalLines is how much of hostlet's own log a failed wait shows.
const journalLines = 40

// waitNodeReady waits until the hostlet systemd just restarted has its
// Node registered and Ready, watching it with the node's new credentials
// (what hostlet itself uses, so a wrong identity shows here too). Join
// wrote everything before, so a failure leaves the host joined: the error
// says what is wrong and join exits non-zero.
func waitNodeReady(ctx context.Context, cfg Config, restarted time.Time) error {
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Layout.Kubeconfig())
	if err != nil {
		return fmt.Errorf("the node's kubeconfig %s: %w", cfg.Layout.Kubeconfig(), err)
	}
	rc.UserAgent = "hostlet-join"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	w := readyWait{client: client, clock: clock.RealClock{}, node: cfg.NodeName, timeout: cfg.WaitTimeout,
		out: cfg.Out, logs: journalTail}
	return w.wait(ctx, restarted)
}

// journalTail is the unit's last log lines, as the user would ask for them.
func journalTail() string {
	args := []string{"-u", unitName, "-n", fmt.Sprint(journalLines), "--no-pager"}
	out, err := exec.Command("journalctl", args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(journalctl %s: %v) %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimRight(string(out), "\n")
}

// readyWait waits for one Node to be Ready.
type readyWait struct {
	client  kubernetes.Interface
	clock   clock.Clock
	node    string
	timeout time.Duration
	out     io.Writer // progress, for the user
	// logs are hostlet's own last log lines, for a node not Ready in time.
	logs func() string
}

// wait watches the Node until its Ready condition is True in a status
// written at or after since (a Node Ready from before a restart says
// nothing about the new hostlet), or until w.timeout on w.clock. Progress
// is printed as the Node changes, not on a timer.
func (w readyWait) wait(parent context.Context, since time.Time) error {
	fmt.Fprintf(w.out, "Waiting up to %s for node %s to be registered and Ready (--wait-timeout)...\n", w.timeout, w.node)
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	timedOut := make(chan struct{})
	timer := w.clock.NewTimer(w.timeout)
	defer timer.Stop()
	go func() {
		select {
		case <-timer.C():
			close(timedOut)
			cancel()
		case <-ctx.Done():
		}
	}()

	// The informer retries a failed list or watch on its own and says
	// nothing to us: the last failure is kept for the message.
	var mu sync.Mutex
	var apiErr error
	seen := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			apiErr = err
		}
	}
	// A node may list and watch only its own Node, by name.
	sel := fields.OneTermEqualSelector("metadata.name", w.node).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			l, err := w.client.CoreV1().Nodes().List(ctx, o)
			seen(err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			wi, err := w.client.CoreV1().Nodes().Watch(ctx, o)
			seen(err)
			return wi, err
		},
	}
	p := progress{node: w.node, since: since, out: w.out}
	// The wrapper lets the reflector stream the initial list where the
	// client can (a watch-list), and list then watch where it cannot (the
	// fake clientset of the unit tests).
	_, err := watchtools.UntilWithSync(ctx, cache.ToListWatcherWithWatchListSemantics(lw, w.client), &v1.Node{}, nil, p.observe)
	if err == nil {
		return nil
	}
	select {
	case <-timedOut:
		mu.Lock()
		defer mu.Unlock()
		return w.failure(p, apiErr)
	default:
	}
	if parent.Err() != nil {
		return parent.Err()
	}
	return fmt.Errorf("watching node %s: %w", w.node, err)
}

// failure says why the node is not Ready: what its Ready condition says,
// or that it never appeared, and hostlet's own last words.
func (w readyWait) failure(p progress, apiErr error) error {
	var b strings.Builder
	if !p.found {
		fmt.Fprintf(&b, "node %s was not registered within %s: hostlet is not running or cannot reach the API server", w.node, w.timeout)
		if apiErr != nil {
			fmt.Fprintf(&b, " (with the node's credentials: %v)", apiErr)
		}
	} else {
		fmt.Fprintf(&b, "node %s is not Ready after %s: %s", w.node, w.timeout, p.state)
	}
	if w.logs != nil {
		fmt.Fprintf(&b, "\nhostlet's last log lines (journalctl -u %s -n %d --no-pager):\n%s", unitName, journalLines, w.logs())
	}
	fmt.Fprintf(&b, "\nThe node's files and %s are in place: once the cause is fixed, run systemctl restart %s (or join again).", unitName, unitName)
	return errors.New(b.String())
}

// progress follows one Node through the watch's events.
type progress struct {
	node  string
	since time.Time
	out   io.Writer
	found bool
	state string // the last state printed
}

// observe is the watch's condition: true once the Node is Ready in a
// status written since p.since. Each new state is printed once.
func (p *progress) observe(ev watch.Event) (bool, error) {
	n, ok := ev.Object.(*v1.Node)
	if !ok || n.Name != p.node {
		return false, nil
	}
	if ev.Type == watch.Deleted {
		p.found, p.state = false, ""
		fmt.Fprintf(p.out, "  node %s was deleted\n", p.node)
		return false, nil
	}
	if !p.found {
		p.found = true
		fmt.Fprintf(p.out, "  node %s is registered\n", p.node)
	}
	state, ready := readiness(n, p.since)
	if state != p.state {
		p.state = state
		fmt.Fprintf(p.out, "  node %s: %s\n", p.node, state)
	}
	return ready, nil
}

// readiness says in words where the Node stands, and whether it is Ready
// in a status written since since. The API keeps times to the second, so
// since is too.
func readiness(n *v1.Node, since time.Time) (string, bool) {
	var c *v1.NodeCondition
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == v1.NodeReady {
			c = &n.Status.Conditions[i]
		}
	}
	switch {
	case c == nil:
		return "no Ready condition yet", false
	case c.Status == v1.ConditionTrue && c.LastHeartbeatTime.Time.Before(since.Truncate(time.Second)):
		return "Ready in a status from before hostlet's restart; waiting for the restarted hostlet's", false
	case c.Status == v1.ConditionTrue:
		return "Ready", true
	case c.Message != "":
		return fmt.Sprintf("Ready=%s (%s): %s", c.Status, c.Reason, c.Message), false
	default:
		return fmt.Sprintf("Ready=%s (%s)", c.Status, c.Reason), false
	}
}
