// Package images builds the container images hostlet's e2e tests run and
// serves them from a loopback registry.
//
// No registry is reachable from the test machines, so images are assembled
// here from local inputs: Debian's static busybox and the testapp binary
// (./testapp), built on the spot. BuildAll writes each image as a tarred OCI
// image layout that `ctr images import` and containerd's client Import accept
// under its full name; StartRegistry serves them over plain HTTP (optionally
// behind basic auth) to exercise real pulls, pull policies and pull secrets.
//
// Layers are reproducible (fixed mtimes, sorted entries, root ownership), so
// the same inputs always give the same digests, and archives are cached in
// the output directory under a key derived from those inputs.
//
// cmd/dig and cmd/getent (over ./resolver) are the dig and getent that the
// conformance run (test/conformance) puts into its agnhost and
// jessie-dnsutils stand-ins for the DNS specs' probe pods.
//
// csihostdir (cmd/csi-hostdir as a process) is a small real CSI driver,
// registering through the kubelet's plugin registry, that the CSI e2e tests
// run next to hostlet: upstream's csi-driver-host-path and
// node-driver-registrar are not served by the module proxy.
// cmd/hostpathplugin, cmd/csi-node-driver-registrar and cmd/livenessprobe
// are stand-ins for those upstream images (csihostdir under the upstream
// plugin's flags; the registrar's and livenessprobe's documented behaviour)
// that test/conformance -csi-hostpath runs e2e.test's csi-hostpath
// testsuites on.
package images
