// Pins flannel's CNI plugin (built only when asked: build.sh flannel). The
// plugin kube-flannel.yml installs, github.com/flannel-io/cni-plugin, is not
// served by the module proxy these tests build from; it is the continuation
// of containernetworking/plugins' meta/flannel, whose last release with it is
// v0.9.1: same config, same /run/flannel/subnet.env, same delegation to
// bridge and host-local.
module github.com/hostlet/hostlet/test/cluster/flannel/cni-plugin

go 1.26.0

tool github.com/containernetworking/plugins/plugins/meta/flannel

require (
	github.com/Microsoft/go-winio v0.4.11 // indirect
	github.com/Microsoft/hcsshim v0.8.6 // indirect
	github.com/buger/jsonparser v0.0.0-20180808090653-f4dd9f5a6b44 // indirect
	github.com/containernetworking/cni v0.8.1 // indirect
	github.com/containernetworking/plugins v0.9.1 // indirect
	github.com/sirupsen/logrus v1.0.6 // indirect
	golang.org/x/crypto v0.0.0-20200622213623-75b288015ac9 // indirect
	golang.org/x/sys v0.0.0-20201117170446-d9b008d0a637 // indirect
)
