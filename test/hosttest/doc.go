// Package hosttest joins a real host to a cluster as a user does: a Debian
// VM (systemd as PID 1, cgroup v2, Debian's kernel) booted under qemu in a
// network namespace of the test's own, joined with the chart and `hostlet
// join` to a harness control plane, then driven over ssh. It runs only with
// HOSTLET_HOSTTEST=1 (make hosttest): see README.md here.
package hosttest
