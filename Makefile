# hostlet: a Virtual Kubelet provider that runs a node's pods with containerd.
# Everything the targets need is installed or built here (apt-get, Go
# modules); builds of the real components are cached outside the repo.

SHELL   := /bin/bash
CACHE   ?= $(HOME)/.cache/hostlet
BIN     := $(CURDIR)/bin
DEV_DIR ?= /var/tmp/hostlet-dev
export GOFLAGS ?= -buildvcs=false
export PATH := /usr/local/go/bin:$(PATH)

# hostlet's build tags, defined once in test/images (HostletTags), which the
# e2e, bench and conformance builds use too.
HOSTLET_TAGS := $(shell sed -n 's/^const HostletTags = "\(.*\)"$$/\1/p' test/images/inputs.go)
ifeq ($(HOSTLET_TAGS),)
$(error HostletTags not found in test/images/inputs.go)
endif

# hostlet's version (hostlet version prints it): git describe of the nearest
# v* tag, else v0.0.0-<commits>-g<sha> while there is none; -dirty for a
# changed work tree (hack/release/version.sh).
VERSION ?= $(shell hack/release/version.sh)
# Every file's time in the release artifacts: the commit's, so the same commit
# gives the same bytes.
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null)
# Where make release writes dist/<version>/, and the repository the release's
# image is named in and the packaged chart pulls the approver from (the
# project has no registry of its own yet: push the image where this says).
DIST       ?= $(CURDIR)/dist
IMAGE_REPO ?= ghcr.io/hostlet/hostlet

APT_PACKAGES := libseccomp-dev busybox-static containernetworking-plugins iptables iproute2 dbus-daemon
# Only make bench needs these: crun's build (for -runtime crun).
BENCH_APT_PACKAGES := libsystemd-dev libcap-dev pkg-config
# Only make hosttest needs these: the VM image's build and qemu.
HOSTTEST_APT_PACKAGES := mmdebstrap qemu-system-x86 qemu-utils openssh-client e2fsprogs

.PHONY: all build deps bench-deps hosttest-deps components images dev dev-down test unit e2e vet clean conformance conformance-compare conformance-storage bench compat e2e-prometheus release release-test hosttest conformance-full crashtest node-e2e

all: build

# apt_install: installs those of the packages $(1) that are missing (as root),
# with apt-get options $(2).
apt_install = missing=""; for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) $$missing >/dev/null; \
	fi

## deps: Debian packages the node and the tests need (as root).
deps:
	@$(call apt_install,$(APT_PACKAGES))

## build: the hostlet binary in ./bin.
build:
	go build -tags=$(HOSTLET_TAGS) -ldflags "-X main.version=$(VERSION)" -o $(BIN)/hostlet ./cmd/hostlet

## release: this commit's release in $(DIST)/$(VERSION)/ (hack/release):
## static, stripped hostlet for linux/amd64 and linux/arm64 (CGO_ENABLED=0:
## hostlet has no cgo; libseccomp is runc's, the seccomp profile a spec), a
## .deb per arch, the multi-platform image $(IMAGE_REPO):$(VERSION) as an
## OCI archive, the chart packaged with that image and version, SHA256SUMS.
## Reproducible (the same commit, Go and Helm give the same bytes); offline
## once the modules and Helm are cached. Needs dpkg-deb; builds Helm on
## first use (test/cluster/helm).
release:
	@[ "$(VERSION)" != dev ] || { echo "make release: not a git checkout: set VERSION=vX.Y.Z and SOURCE_DATE_EPOCH" >&2; exit 1; }
	helm=$$(test/cluster/helm/build.sh) && \
	go run ./hack/release -version $(VERSION) -source-date-epoch $(SOURCE_DATE_EPOCH) \
		-image-repo $(IMAGE_REPO) -helm $$helm/helm -out $(DIST)

## release-test: make release's test (hack/release): this commit's release
## built twice and compared byte for byte, the binaries static, stripped and
## versioned, each .deb's files and its unpack into a fresh dpkg root, the
## image pushed to a loopback registry, the packaged chart rendered. Two
## builds: minutes, so not in make test.
release-test:
	HOSTLET_RELEASE_TEST=1 go test -count=1 -timeout 60m -v -run 'TestRelease$$' ./hack/release

## components: etcd, the control plane, kubectl, containerd and runc (cached).
components: deps
	test/cluster/build.sh

## images: the local test images as OCI archives (cached).
images: deps
	go run ./test/images/cmd/build-images -out $(CACHE)/images

## dev: a local control plane with containerd and hostlet as its node.
dev: build components images
	@if [ -f $(DEV_DIR)/ready ] && kill -0 $$(cat $(DEV_DIR)/pid 2>/dev/null) 2>/dev/null; then \
		echo "dev cluster already running"; \
	else \
		mkdir -p $(DEV_DIR); rm -f $(DEV_DIR)/ready; \
		go build -o $(BIN)/localcluster ./test/harness/cmd/localcluster; \
		nohup $(BIN)/localcluster up --dir $(DEV_DIR) --hostlet $(BIN)/hostlet --images $(CACHE)/images \
			> $(DEV_DIR)/localcluster.log 2>&1 & \
		for i in $$(seq 1 180); do [ -f $(DEV_DIR)/ready ] && break; \
			kill -0 $$! 2>/dev/null || { tail -50 $(DEV_DIR)/localcluster.log; exit 1; }; sleep 1; done; \
		[ -f $(DEV_DIR)/ready ] || { tail -50 $(DEV_DIR)/localcluster.log; exit 1; }; \
	fi
	@echo
	@echo "The local cluster is up, with hostlet as node hostlet-dev. Use it with:"
	@echo "  export KUBECONFIG=$(DEV_DIR)/kubeconfig PATH=$(CACHE)/bin:\$$PATH"
	@echo "  kubectl get nodes"
	@echo "  kubectl run t --image=hostlet.local/busybox:1.35 --restart=Never -- echo hi"
	@echo "  kubectl logs t"
	@echo "Logs: $(DEV_DIR)/logs/. Stop it with: make dev-down"

dev-down:
	@if [ -x $(BIN)/localcluster ]; then $(BIN)/localcluster down --dir $(DEV_DIR); else echo "no dev cluster"; fi

vet:
	go vet ./...

## test: unit tests, then the e2e suite against a real control plane,
## containerd, runc and CNI.
test: deps components images vet
	go test -count=1 -timeout 60m ./...

## e2e: only the e2e suite (RUN='TestExec$$' for a selection), with the
## components and images it needs.
e2e: deps components images
	go test -count=1 -timeout 60m ./test/e2e $(if $(RUN),-run '$(RUN)') -v

## crashtest: the crash test of issue 46 (test/e2e/crash_test.go): bursts of
## 40 pod starts and 40 pod deletes on a node with its own containerd, with
## hostlet, containerd or both SIGKILLed and restarted at 10 moments spread
## over each burst, the pods and the host (containers, sandboxes, IPAM,
## network namespaces, mounts, cgroups, directories) checked after each.
## Not in make test: about 20 minutes. HOSTLET_CRASH_KILLS=2 for a quick run.
crashtest: deps components images
	HOSTLET_CRASH_TEST=1 go test -count=1 -timeout 90m ./test/e2e -run '^TestCrash$$' -v

## compat: the same hostlet against a newer control plane (kube-apiserver,
## controller-manager, scheduler and kubectl v1.37 from test/cluster/kube137,
## built on first use and cached): the join test and a smoke subset of the e2e
## suite (pods, probes, logs, exec, attach, port-forward, node status and
## lease, kubelet API, volumes, Services and DNS). Not in make test: the
## first build takes ~30 CPU-minutes (an hour on two busy cores), a run ~6 min.
COMPAT_TESTS := TestJoinAndLeave|TestPodRunsToCompletion|TestExec|TestExecInteractive|TestDeleteRemovesContainers|TestRestartPolicies|TestInitContainers|TestSidecar|TestLivenessHTTPFailureRestarts|TestReadinessFollowsApp|TestStartupProbeHoldsLiveness|TestTCPAndGRPCProbes|TestLogsOptions|TestLogsFollow|TestAttachTTY|TestPortForward|TestEphemeralContainer|TestNodeCapacity|TestNodeLeaseRenews|TestNodeStatusEditReverted|TestKubeletAPIAuthorization|TestKubeletStatsAndMetrics|TestVolumesContent|TestVolumeTokenRefresh|TestEnvSources|TestGracefulDeletionReachesTerminalPhase|TestServiceClusterIPAndNodePort|TestDNSServiceNames
compat: deps components
	test/cluster/kube137/build.sh >/dev/null
	HOSTLET_CONTROL_PLANE=1.37 go test -count=1 -timeout 45m ./test/e2e -run '^($(COMPAT_TESTS))$$' -v

## e2e-prometheus: a real Prometheus (test/cluster/prometheus/build.sh, built
## from its Go module on first use and cached: ~11 min on two busy cores) scraping a
## hostlet node's /metrics/cadvisor through the API server's node proxy, as
## the classic cadvisor job does, and the standard dashboards' and alerts'
## queries (CPU, memory, throttling, network) answering for a hostlet pod.
## Not in make test for that build.
e2e-prometheus: deps components images
	test/cluster/prometheus/build.sh >/dev/null
	E2E_PROMETHEUS=1 go test -count=1 -timeout 20m ./test/e2e -run '^TestCadvisorThroughAPIServerProxy$$' -v

## conformance: the upstream node conformance tests (e2e.test of the pinned
## Kubernetes release, test/conformance/selection.txt) against a local
## cluster with hostlet as its only node. Fails on a failure outside
## test/conformance/known-failures.txt. Also runs test/conformance/storage.txt's
## cheap "always" [sig-storage] specs (HostPathType, common/storage's untagged
## FSGroup ones; under 3 minutes more); conformance-storage runs all of it.
## Results: $(CACHE)/conformance/results.
## Pass runner flags with CONFORMANCE_FLAGS, e.g. CONFORMANCE_FLAGS='-focus Probing'.
## CONTROL_PLANE=1.37 runs it (and conformance-full) against the newer control
## plane make compat uses (test/cluster/kube137: kube-apiserver,
## controller-manager, scheduler, kubectl and kube-proxy of that version), with
## the same e2e.test (v1.35) and hostlet: a node two minors behind its control
## plane, within the kubelet's supported skew of three.
CONTROL_PLANE ?=
CONFORMANCE_CP := $(if $(CONTROL_PLANE),-control-plane $(CONTROL_PLANE))
conformance: deps components
	HOSTLET_CACHE=$(CACHE) go run ./test/conformance $(CONFORMANCE_CP) $(CONFORMANCE_FLAGS)

## conformance-full: every [Conformance] test of e2e.test (441 in v1.35, not
## just selection.txt's node part) on a cluster of two hostlet nodes, each
## in its own network namespace with its own containerd, flannel (host-gw)
## as the CNI DaemonSet, kube-proxy and CoreDNS; the [Serial] tests after
## the others; counts per SIG. The nodes join as a user joins them: the chart
## installed with helm, `hostlet join` with its bootstrap token on each node
## (CONFORMANCE_FLAGS=-join=false: certificates the harness mints). About an
## hour on a loaded 2-core machine (57 min in two focused runs); narrow it with
## CONFORMANCE_FLAGS='-focus sig-apps'; CONFORMANCE_FLAGS='-node-kind kubelet' runs
## it on two upstream kubelet nodes in the same layout, '-node-kind hostlet,kubelet'
## on both in turn with the counts per SIG side by side and the specs whose
## outcome differs. Results: $(CACHE)/conformance/results.
conformance-full: deps components
	HOSTLET_CACHE=$(CACHE) go run ./test/conformance -full $(CONFORMANCE_CP) $(CONFORMANCE_FLAGS)

## conformance-compare: the same selection against hostlet, then against the
## upstream kubelet of the pinned release (containerd's CRI) on the same
## setup, with both counts side by side and the tests only hostlet fails
## (hostlet's bugs; what both fail is the environment's). E.g.
## CONFORMANCE_FLAGS='-focus sig-network' for the Services and DNS part.
conformance-compare: deps components
	HOSTLET_CACHE=$(CACHE) go run ./test/conformance -node-kind hostlet,kubelet $(CONFORMANCE_FLAGS)

## node-e2e: the kubelet's own suite (test/e2e_node of the pinned release,
## e2e_node.test, built on first use and cached) on a hostlet node as
## upstream's node conformance runs it against an existing node
## (--start-services=false): its [NodeConformance] specs, in parallel, then
## the [Serial] ones; the suite on the node (its network namespace), reading
## the node's /configz, its read-only port and static pod dir, and its CRI
## socket (hostlet's --cri-socket). Fails on a hostlet failure outside
## test/conformance/node-known-failures.txt. CONFORMANCE_FLAGS='-node-kind
## hostlet,kubelet' runs it on the upstream kubelet too, side by side;
## CONFORMANCE_FLAGS='-focus Lifecycle' narrows it. Not in make test.
node-e2e: deps components
	HOSTLET_CACHE=$(CACHE) go run ./test/conformance -node-e2e $(CONFORMANCE_FLAGS)

## conformance-storage: the [sig-storage] specs one node runs without any
## CSI driver image (test/conformance/storage.txt: the in-tree local,
## hostPath, hostPathSymlink and emptydir drivers' testsuites,
## PersistentVolumes-local, HostPathType, ...) instead of selection.txt's,
## on hostlet and on the upstream kubelet side by side. Too long for every
## make conformance; fails on a hostlet failure outside known-failures.txt.
conformance-storage: deps components
	HOSTLET_CACHE=$(CACHE) go run ./test/conformance -storage -node-kind hostlet,kubelet $(CONFORMANCE_FLAGS)

## bench: hostlet against the upstream kubelet of the pinned release, two
## nodes of one local cluster on this machine, the same pods on each in turn
## (start, exit, delete latency; CPU, RSS and API writes with 100 probed
## pods; the density curve of 30, 110 and 250 pods, per pod; join time, a
## bootstrap token to the first pod Running; images: 30 pods of a 500 MB
## image on fresh nodes, normal, lazy and 3-node pulls with and without the
## registry mirror, -image-mb to shrink it). About 30 minutes. Results:
## $(CACHE)/bench/latest.md. Pass flags with BENCH_FLAGS, e.g.
## BENCH_FLAGS='-probed 50 -window 30s', BENCH_FLAGS='-scenarios
## density,join -density 30,110', BENCH_FLAGS='-nodes hostlet -profile
## /tmp/prof' for hostlet's profiles, or BENCH_FLAGS='-runtime crun' for
## the hostlet node's pods on crun (built from Debian's source).
bench: deps bench-deps components
	HOSTLET_CACHE=$(CACHE) go run ./test/bench -out $(CACHE)/bench/latest.md $(BENCH_FLAGS)

bench-deps:
	@$(call apt_install,$(BENCH_APT_PACKAGES),--no-install-recommends)

## hosttest: Debian 12 and 13 VMs (systemd as PID 1, cgroup v2, built from
## Debian's packages with mmdebstrap and cached in $(CACHE)/vm) booted under
## qemu in a network namespace of their own and joined to a local control
## plane as a user joins a host, once per cgroup driver: pods with limits,
## logs and exec, a service restart, a real poweroff with graceful node
## shutdown, a reboot, leave. Not in make test: about 16 minutes (see
## test/hosttest/README.md). HOSTTEST_SUITES=bookworm HOSTTEST_DRIVERS=systemd
## runs one of the four.
hosttest-deps:
	@$(call apt_install,$(HOSTTEST_APT_PACKAGES),--no-install-recommends)

hosttest: deps hosttest-deps components images
	HOSTLET_HOSTTEST=1 HOSTLET_CACHE=$(CACHE) go test -count=1 -timeout 120m ./test/hosttest -run TestDebianHost -v

unit:
	go test -count=1 -short ./lifecycle/... ./provider/... ./runtime/... ./cmd/...

clean:
	rm -rf $(BIN)
