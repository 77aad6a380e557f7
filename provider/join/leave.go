package join

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// LeaveConfig is what `hostlet leave` was asked for.
type LeaveConfig struct {
	Layout Layout
	// Kubeconfig acts for the node; default the one join wrote (the node's
	// own identity may cordon its Node, evict its pods and, with the
	// chart's rbac.nodeSelfDelete, delete its Node).
	Kubeconfig string
	// Timeout bounds the drain (evictions refused by a PodDisruptionBudget
	// are retried until then).
	Timeout time.Duration
	// SkipSystemd: hostlet does not run as join's unit; StopCommand (sh -c)
	// stops it instead, and must return once it has stopped.
	SkipSystemd bool
	StopCommand string
	// CleanHost, if set, removes what hostlet left on the host (cmd/hostlet:
	// the CSI volumes through their drivers first, then the pods'
	// containers, sandboxes, directories, logs and cgroups, the kubepods
	// cgroups or slices, the root dir and hostlet's logind drop-in) once
	// hostlet is stopped and the Node deleted: the pods a drain leaves
	// (DaemonSets') and cleanups the stop cut short. It reads hostlet's
	// config file, so it runs before join's files are removed.
	CleanHost func(ctx context.Context) error
	Out       io.Writer
}

// evictRetry is how often an eviction a PodDisruptionBudget refused (429)
// is tried again, as kubectl drain does.
const evictRetry = 2 * time.Second

// Leave takes this host out of the cluster: cordon, evict its pods through
// the Eviction API (budgets respected, DaemonSet and mirror pods left),
// wait for them to be gone, stop hostlet, delete the Node, clean the host
// (CleanHost), remove join's files. hostlet must run while pods are
// evicted: it is what stops them.
func Leave(ctx context.Context, cfg LeaveConfig) error {
	if cfg.Kubeconfig == "" {
		cfg.Kubeconfig = cfg.Layout.Kubeconfig()
	}
	// hostlet must stop before its Node is deleted, or it registers again.
	if cfg.StopCommand == "" && (cfg.SkipSystemd || !systemdRuns()) {
		return errors.New("hostlet does not run as join's systemd unit here: give --stop-command, a command that stops it and returns once it has")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w (has this host joined?)", cfg.Kubeconfig, err)
	}
	rc.UserAgent = "hostlet-leave"
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	name, err := nodeNameOf(cfg)
	if err != nil {
		return err
	}
	log := log.WithField("node", name)
	// The timeout bounds the drain; the host's cleanup after it gets a
	// time of its own.
	hostCtx := ctx
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()

	gone := false
	if _, err := client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType,
		[]byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); apierrors.IsNotFound(err) {
		log.Warn("the Node does not exist: nothing to drain")
		gone = true
	} else if err != nil {
		return fmt.Errorf("cordoning node %s: %w", name, err)
	} else {
		log.Info("cordoned")
		if err := drain(ctx, client, name, log); err != nil {
			return err
		}
	}
	if err := stopHostlet(cfg); err != nil {
		return err
	}
	if !gone {
		err := client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		if apierrors.IsForbidden(err) {
			return fmt.Errorf("deleting node %s: %w (install the chart with rbac.nodeSelfDelete=true, or run: kubectl delete node %s; then run hostlet leave again)", name, err, name)
		}
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting node %s: %w", name, err)
		}
		log.Info("Node deleted")
	}
	if cfg.CleanHost != nil {
		if err := cfg.CleanHost(hostCtx); err != nil {
			return fmt.Errorf("cleaning up the host (hostlet is stopped and the Node gone; run hostlet leave again): %w", err)
		}
		log.Info("what hostlet made for pods on the host is removed")
	}
	if err := cfg.Layout.removeServingPairs(); err != nil {
		return err
	}
	if err := cfg.Layout.remove(); err != nil {
		return err
	}
	fmt.Fprintf(cfg.Out, "Node %s left the cluster; the files join wrote are removed.\n", name)
	return nil
}

// nodeNameOf is the name in the node's client certificate.
func nodeNameOf(cfg LeaveConfig) (string, error) {
	cc, err := clientcmd.LoadFromFile(cfg.Kubeconfig)
	if err != nil {
		return "", err
	}
	ctx := cc.Contexts[cc.CurrentContext]
	if ctx == nil || cc.AuthInfos[ctx.AuthInfo] == nil {
		return "", fmt.Errorf("kubeconfig %s has no current user", cfg.Kubeconfig)
	}
	user, ok := strings.CutPrefix(ctx.AuthInfo, "system:node:")
	if !ok {
		return "", fmt.Errorf("kubeconfig %s is not a node's (user %q)", cfg.Kubeconfig, ctx.AuthInfo)
	}
	return user, nil
}

// drain evicts every pod of the node that a drain moves and waits until
// they are gone.
func drain(ctx context.Context, client kubernetes.Interface, name string, log *log.Entry) error {
	byNode := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", name).String()}
	pods, err := client.CoreV1().Pods("").List(ctx, byNode)
	if err != nil {
		return fmt.Errorf("listing the node's pods: %w", err)
	}
	var evict []v1.Pod
	for _, p := range pods.Items {
		if _, mirror := p.Annotations[v1.MirrorPodAnnotationKey]; mirror || ownedByDaemonSet(&p) {
			continue
		}
		evict = append(evict, p)
	}
	for _, p := range evict {
		if err := evictPod(ctx, client, &p, log); err != nil {
			return err
		}
	}
	// Listed, not got one by one: the node may get only pods bound to it,
	// so a deleted pod is Forbidden to it, not NotFound.
	err = wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
		left, err := client.CoreV1().Pods("").List(ctx, byNode)
		if err != nil {
			return false, nil
		}
		for _, cur := range left.Items {
			for _, p := range evict {
				if cur.UID == p.UID {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("evicted pods are still on the node (is hostlet running? it stops them): %w", err)
	}
	log.WithField("pods", len(evict)).Info("drained")
	return nil
}

func ownedByDaemonSet(p *v1.Pod) bool {
	c := metav1.GetControllerOf(p)
	return c != nil && c.Kind == "DaemonSet"
}

// evictPod asks for the pod's eviction until the API grants it: a 429 is a
// PodDisruptionBudget saying "not now".
func evictPod(ctx context.Context, client kubernetes.Interface, p *v1.Pod, log *log.Entry) error {
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}}}
	for {
		err := client.CoreV1().Pods(p.Namespace).EvictV1(ctx, ev)
		switch {
		case err == nil:
			log.WithField("pod", p.Namespace+"/"+p.Name).Info("evicted")
			return nil
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
			return nil // gone already, or a new pod of that name
		case apierrors.IsTooManyRequests(err):
			log.WithField("pod", p.Namespace+"/"+p.Name).Infof("eviction refused for now (%v); retrying", err)
		default:
			return fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("evicting pod %s/%s: a PodDisruptionBudget still refuses it: %w", p.Namespace, p.Name, ctx.Err())
		case <-time.After(evictRetry):
		}
	}
}

// stopHostlet stops and disables join's unit, or runs StopCommand.
func stopHostlet(cfg LeaveConfig) error {
	if cfg.StopCommand != "" {
		if out, err := exec.Command("sh", "-c", cfg.StopCommand).CombinedOutput(); err != nil {
			return fmt.Errorf("--stop-command: %w: %s", err, out)
		}
		return nil
	}
	if err := systemctl("disable", "--now", unitName); err != nil {
		return err
	}
	// After hostlet: the snapshotter's mounts go with it (containers gone).
	if err := stopStargz(cfg.Layout); err != nil {
		return err
	}
	return systemctl("daemon-reload")
}
