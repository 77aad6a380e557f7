// Package join adds this host to a cluster and removes it again, the way
// kubeadm join and the kubelet's TLS bootstrap do: preflight checks, token
// discovery of the cluster CA (JWS signature and public-key pin), a CSR for
// the node's client certificate, the cluster DNS from kube-system's
// kubelet-config (kubeadm's) or hostlet-kubelet-config (the chart's), the
// files and systemd unit hostlet runs from, a wait for the Node to be Ready;
// and leave (cordon, evict, stop, delete the Node, remove the files); and,
// for the life of the node, its client and serving certificates renewed
// through CSRs as the kubelet's are.
package join
