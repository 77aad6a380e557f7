package main

import (
	"os"

	"github.com/hostlet/hostlet/runtime"
)

// newRuntime connects to containerd; eventStream, if set, is told whether
// its event stream is up.
func newRuntime(o *options, nodeIP string, eventStream func(error)) (*runtime.Runtime, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cgroups, err := o.cgroupConfig()
	if err != nil {
		return nil, err
	}
	return runtime.New(runtime.Config{
		Cgroups:  cgroups,
		Endpoint: o.runtimeEndpoint, Namespace: o.containerdNS, RootDir: o.rootDir,
		Executable: self, NodeIP: nodeIP,
		CNIConfDir: o.cniConfDir, CNIBinDirs: o.cniBinDirs, CNICacheDir: o.cniCacheDir,
		CNIDefaultBridge:  o.cniDefaultBridge,
		RegistryConfigDir: o.registryConfigDir,
		Snapshotter:       o.imageSnapshotter,
		SnapshotterCreds:  o.stargzCredentials,
		CDISpecDirs:       o.cdiSpecDirs,
		PodLogsDir:        o.podLogsDir,
		ContainerLogsDir:  o.containerLogsDir,
		EventStream:       eventStream,
		TracerProvider:    o.tracer,
	})
}
