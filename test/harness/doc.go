// Package harness runs a throwaway Kubernetes control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler), a private
// containerd and a CNI bridge configuration on loopback, for hostlet's e2e
// tests and `make dev` (cmd/localcluster). All state lives under one
// directory; several clusters can run on one machine at once (free ports, own
// containerd sockets and root, own bridge name and pod /24).
//
// Typical e2e use (as root):
//
//	c, err := harness.Start(ctx, harness.Options{Logf: t.Logf})
//	defer c.Stop()
//	bin, _ := harness.BuildHostlet(ctx)
//	c.ImportImage(ctx, "busybox.tar") // see WriteBusyboxImage
//	c.StartHostlet(ctx, harness.HostletOptions{Binary: bin, NodeName: "n1"})
//	ns := c.NewNamespace(t)
//	pod := c.CreatePod(t, &v1.Pod{...})
//	pod, err = c.WaitForPod(ctx, ns, pod.Name, time.Minute, harness.PodRunning)
//
// Binaries come from test/cluster/build.sh (or $HOSTLET_BIN_DIR /
// Options.BinDir). Every daemon the harness starts dies with the process that
// started it (Pdeathsig); what cannot (containerd shims, containers, mounts,
// the bridge) is recorded in /run/hostlet-harness and reaped by the next
// Start on the machine if its owner died without calling Stop.
package harness
