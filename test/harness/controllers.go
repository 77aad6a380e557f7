package harness

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startControllerManager runs kube-controller-manager. It is what gives every
// namespace its "default" ServiceAccount and "kube-root-ca.crt" ConfigMap,
// signs CSRs with the cluster CA and runs node lifecycle.
func (c *Cluster) startControllerManager() (*process, error) {
	args := []string{
		"--kubeconfig", c.adminKubeconfig,
		"--service-account-private-key-file", c.pki.SAKey,
		"--root-ca-file", c.pki.CACert,
		"--use-service-account-credentials=true",
		"--cluster-signing-cert-file", c.pki.CACert,
		"--cluster-signing-key-file", c.pki.CAKey,
		"--controllers", "*,bootstrapsigner,tokencleaner",
		"--leader-elect=false",
		// With per-controller credentials, startup creates a ServiceAccount
		// and token for each controller; the default 20 QPS throttles that
		// into ~5 s before namespaces get their default ServiceAccount.
		"--kube-api-qps", "200",
		"--kube-api-burst", "400",
		// No serving endpoint: nothing scrapes it and it saves a port.
		"--secure-port", "0",
	}
	if c.opts.NodeCIDRMaskSize > 0 {
		args = append(args, "--allocate-node-cidrs", "--cluster-cidr", c.inst.Subnet,
			"--node-cidr-mask-size", fmt.Sprint(c.opts.NodeCIDRMaskSize))
	}
	args = append(args, c.opts.ControllerManagerArgs...)
	return c.launch("kube-controller-manager", filepath.Join(c.binDir, "kube-controller-manager"), args...)
}

// startScheduler runs kube-scheduler against the admin kubeconfig.
func (c *Cluster) startScheduler() (*process, error) {
	args := []string{
		"--kubeconfig", c.adminKubeconfig,
		"--leader-elect=false",
		"--secure-port", "0",
	}
	args = append(args, c.opts.SchedulerArgs...)
	return c.launch("kube-scheduler", filepath.Join(c.binDir, "kube-scheduler"), args...)
}

// waitNamespaceReady waits until the controller-manager has populated ns with
// its default ServiceAccount and the kube-root-ca.crt ConfigMap; pods cannot
// be admitted (SA) or started (token volume) before that.
func (c *Cluster) waitNamespaceReady(ctx context.Context, p *process, ns string) error {
	check := func(ctx context.Context) error {
		if _, err := c.client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err != nil {
			return fmt.Errorf("serviceaccount %s/default: %w", ns, err)
		}
		if _, err := c.client.CoreV1().ConfigMaps(ns).Get(ctx, "kube-root-ca.crt", metav1.GetOptions{}); err != nil {
			return fmt.Errorf("configmap %s/kube-root-ca.crt: %w", ns, err)
		}
		return nil
	}
	return p.waitFor(ctx, "namespace "+ns+" to be populated", 100*time.Millisecond, check)
}
