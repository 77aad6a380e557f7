package podspec

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostlet/hostlet/provider/objects"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes/fake"
)

// fuzzSeedPod is the seed of FuzzPodSpecToRuntime: every volume kind a
// container can mount, subPath and subPathExpr, env from every source,
// security and resources.
func fuzzSeedPod() *v1.Pod {
	t, f := true, false
	uid, mode := int64(1000), int32(0o644)
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1", Labels: map[string]string{"a": "b"}},
		Spec: v1.PodSpec{
			Volumes: []v1.Volume{
				{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
				{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: v1.StorageMediumMemory}}},
				{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/data/x"}}},
				{Name: "cm", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}, DefaultMode: &mode}}},
				{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "s", Optional: &t}}},
				{Name: "dapi", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}}}}}},
			},
			SecurityContext: &v1.PodSecurityContext{RunAsUser: &uid, FSGroup: &uid, Sysctls: []v1.Sysctl{{Name: "net.ipv4.ip_forward", Value: "1"}}},
			InitContainers:  []v1.Container{{Name: "init", Image: "busybox", VolumeMounts: []v1.VolumeMount{{Name: "scratch", MountPath: "/d"}}}},
			Containers: []v1.Container{{
				Name: "c", Image: "busybox",
				Env: []v1.EnvVar{
					{Name: "DIR", Value: "sub/dir"},
					{Name: "POD", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
					{Name: "KEY", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}, Key: "k"}}},
					{Name: "PW", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{LocalObjectReference: v1.LocalObjectReference{Name: "s"}, Key: "pw", Optional: &t}}},
					{Name: "MEM", ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{Resource: "limits.memory"}}},
					{Name: "X", Value: "$(DIR)/$(POD)"},
				},
				EnvFrom: []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cm"}}}},
				VolumeMounts: []v1.VolumeMount{
					{Name: "scratch", MountPath: "/d", SubPath: "a/b"},
					{Name: "scratch", MountPath: "/e", SubPathExpr: "$(DIR)"},
					{Name: "host", MountPath: "/h", SubPath: "logs", ReadOnly: true},
					{Name: "cm", MountPath: "/cm"},
					{Name: "sec", MountPath: "/s"},
					{Name: "dapi", MountPath: "/dapi"},
					{Name: "mem", MountPath: "/m"},
				},
				Resources: v1.ResourceRequirements{
					Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("10Mi")},
					Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("64Mi")},
				},
				SecurityContext: &v1.SecurityContext{AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &t,
					Capabilities: &v1.Capabilities{Add: []v1.Capability{"NET_ADMIN"}, Drop: []v1.Capability{"ALL"}}},
			}},
		},
	}
}

// FuzzPodSpecToRuntime drives random pod specs, valid or not (anything that
// decodes as a Pod), through the translation of a container start that
// does not need containerd: environment, mounts, security and resources.
// It must never panic, and every mount source must lie beneath the pod's
// directory or a hostPath the pod declared. hostPath volumes are moved
// under a test directory first, so the fuzzer never touches host paths.
// The seeds run as a unit test; `go test -fuzz FuzzPodSpecToRuntime
// ./provider` explores.
func FuzzPodSpecToRuntime(f *testing.F) {
	seed, _ := json.Marshal(fuzzSeedPod())
	f.Add(seed)
	for _, s := range []string{
		`{"metadata":{"uid":"u"},"spec":{"volumes":[{"name":"v","emptyDir":{}}],"containers":[{"name":"c","volumeMounts":[{"name":"v","mountPath":"/x","subPath":"../../etc"}]}]}}`,
		`{"metadata":{"uid":"u"},"spec":{"volumes":[{"name":"v","emptyDir":{}}],"containers":[{"name":"c","volumeMounts":[{"name":"v","mountPath":"/x","subPath":"/etc"}]}]}}`,
		`{"metadata":{"uid":"u"},"spec":{"volumes":[{"name":"v","emptyDir":{}}],"containers":[{"name":"c","env":[{"name":"E","value":".."}],"volumeMounts":[{"name":"v","mountPath":"/x","subPathExpr":"$(E)/$(E)"}]}]}}`,
		`{"metadata":{"uid":"u"},"spec":{"volumes":[{"name":"h","hostPath":{"path":"/"}}],"containers":[{"name":"c","volumeMounts":[{"name":"h","mountPath":"/x","subPath":"a/./b"}]}]}}`,
		`{"metadata":{"uid":"../../.."},"spec":{"volumes":[{"name":"v","emptyDir":{}}],"containers":[{"name":"c","volumeMounts":[{"name":"v","mountPath":"/x","subPath":"a/../../b"}]}]}}`,
		`{"metadata":{"uid":"u"},"spec":{"containers":[{"name":"c","volumeMounts":[{"name":"missing","mountPath":"/x"}]}]}}`,
		`{"metadata":{"uid":"u"},"spec":{"containers":[{"name":"c","env":[{"name":"A","valueFrom":{}},{"name":"B","valueFrom":{"fieldRef":{"fieldPath":"metadata.annotations['x"}}},{"name":"C","valueFrom":{"resourceFieldRef":{"resource":"limits.cpu","divisor":"0"}}}]}]}}`,
		`{"spec":{"securityContext":{"runAsNonRoot":true,"seccompProfile":{"type":"Localhost","localhostProfile":"r.json"}},"containers":[{"name":"c","securityContext":{"procMount":"Unmasked","capabilities":{"add":[""]}}}]}}`,
		`{"spec":{"containers":[{"name":"c","resources":{"limits":{"cpu":"1e30","memory":"-1"},"requests":{"cpu":"-5","memory":"1e40"}}}]}}`,
		`{"spec":{"containers":[]}}`,
		`{}`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var pod v1.Pod
		if json.Unmarshal(data, &pod) != nil {
			return
		}
		// What the API guarantees: a server-made UID and DNS-label volume
		// names (both end up in paths).
		pod.UID = "uid-fuzz"
		for _, v := range pod.Spec.Volumes {
			if len(validation.IsDNS1123Label(v.Name)) > 0 {
				return
			}
		}
		root := t.TempDir()
		hostRoot := filepath.Join(root, "host")
		// Declared hostPaths, moved beneath hostRoot.
		var hostPaths []string
		for i := range pod.Spec.Volumes {
			if hp := pod.Spec.Volumes[i].HostPath; hp != nil {
				hp.Path = filepath.Join(hostRoot, filepath.Clean("/"+hp.Path))
				if err := os.MkdirAll(hp.Path, 0o755); err != nil {
					t.Skip(err) // a name the filesystem refuses
				}
				hostPaths = append(hostPaths, hp.Path)
			}
		}
		r := fuzzRuntime(filepath.Join(root, "state"))
		podDir := r.layout().PodDir(pod.UID)
		defer func() { _ = r.teardownVolumes(string(pod.UID)) }()
		// The volume directories as the sandbox's preparation leaves them.
		for _, v := range pod.Spec.Volumes {
			if v.HostPath == nil {
				if err := os.MkdirAll(r.volumeDir(&pod, v.Name), 0o750); err != nil {
					t.Fatal(err)
				}
			}
		}
		var all []v1.Container
		all = append(all, pod.Spec.InitContainers...)
		all = append(all, pod.Spec.Containers...)
		for i := range all {
			c := &all[i]
			env, err := r.containerEnv(context.Background(), &pod, c, []string{"10.0.0.2"}, r.objects(pod.Namespace))
			if err != nil {
				continue
			}
			_, _ = r.containerSecurity(&pod, c, "1000")
			_ = r.containerResources(&pod, c)
			mounts, err := r.containerMounts(context.Background(), &pod, c, env, nil)
			if err != nil {
				continue
			}
			for _, m := range mounts {
				if !within(m.HostPath, append([]string{podDir}, hostPaths...)) {
					t.Fatalf("container %q mounts %q (for %q), outside the pod dir %s and its hostPaths %q", c.Name, m.HostPath, m.ContainerPath, podDir, hostPaths)
				}
			}
		}
	})
}

// within reports whether path, with its symlinks resolved as far as it
// exists (a bind by /proc/self/fd resolves to the opened file), lies
// beneath one of dirs, or is one.
func within(path string, dirs []string) bool {
	real := resolve(path)
	for _, d := range dirs {
		d = resolve(d)
		if real == d || strings.HasPrefix(real, d+"/") {
			return true
		}
	}
	return false
}

func resolve(path string) string {
	path = filepath.Clean(path)
	if r, err := filepath.EvalSymlinks(path); err == nil {
		return r
	}
	return path
}

// fuzzRuntime is the least the translation reads: its config, a node with
// capacity and an API with one ConfigMap and Secret.
func fuzzRuntime(rootDir string) *Runtime {
	client := fake.NewSimpleClientset(
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cm"}, Data: map[string]string{"k": "v", "OTHER": "o"}},
		&v1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "s"}, Data: map[string][]byte{"pw": []byte("x")}},
	)
	res := v1.ResourceList{v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("4Gi")}
	return New(Config{HostIPs: []string{"127.0.0.1"}, RootDir: rootDir, Objects: objects.NewClient(client), Node: fixedNode{res}})
}

// fixedNode is a node whose capacity and allocatable are res.
type fixedNode struct{ res v1.ResourceList }

func (fixedNode) NetworkErrors() error { return nil }

func (fixedNode) Labels() map[string]string {
	return map[string]string{"kubernetes.io/hostname": "node1"}
}

func (n fixedNode) Allocatable() v1.ResourceList { return n.res }
func (n fixedNode) Capacity() v1.ResourceList    { return n.res }
