package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Host safety of volumes: a pod reaches no host path through a subPath
// symlink or a content volume's atomic writer (CVE-2017-1002101,
// CVE-2021-25741, CVE-2017-1002102). Each attack aims at a bait directory
// the test makes on the host, never at a real host path.

// hostBait makes a bait dir on the host with one file in it.
func hostBait(t *testing.T) string {
	t.Helper()
	bait := t.TempDir()
	if err := os.WriteFile(filepath.Join(bait, "secret"), []byte("bait"), 0o644); err != nil {
		t.Fatal(err)
	}
	return bait
}

// checkHostBait: the bait dir holds its one file, unchanged.
func checkHostBait(t *testing.T, bait string) {
	t.Helper()
	entries, err := os.ReadDir(bait)
	if err != nil || len(entries) != 1 {
		t.Errorf("bait dir changed: %v %v", entries, err)
	}
	if b, err := os.ReadFile(filepath.Join(bait, "secret")); err != nil || string(b) != "bait" {
		t.Errorf("bait file changed: %q %v", b, err)
	}
}

// An init container plants a symlink to a host dir in an emptyDir; the app
// container that mounts it as subPath is refused with the kubelet's error
// and never runs, and the host dir is neither read nor written.
func TestHostSafetySubPathSymlink(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	bait := hostBait(t)
	pod := busybox(ns, "subpath-escape", "sh", "-c", "cat /m/secret > /m/stolen; echo pwned > /m/secret; sleep 3600")
	pod.Spec.Containers[0].Name = "app"
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{{Name: "d", MountPath: "/m", SubPath: "x"}}
	pod.Spec.InitContainers = []v1.Container{{Name: "plant", Image: images.BusyboxRef,
		Command:      []string{"ln", "-s", bait, "/d/x"},
		VolumeMounts: []v1.VolumeMount{mount("d", "/d")}}}
	pod.Spec.Volumes = []v1.Volume{{Name: "d", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}
	cluster.CreatePod(t, pod)

	p := waitFor(t, ns, pod.Name, 2*time.Minute, "app refused or started", func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && (cs[0].State.Running != nil || cs[0].State.Terminated != nil ||
			cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CreateContainerConfigError")
	})
	want := `failed to prepare subPath for volumeMount "d" of container "app"`
	if w := p.Status.ContainerStatuses[0].State.Waiting; w == nil || w.Message != want {
		t.Fatalf("app container: %+v, want CreateContainerConfigError %q", p.Status.ContainerStatuses[0].State, want)
	}
	expectEvent(t, ns, pod.Name, "Failed: Error: "+want)
	// It stays refused (the kubelet retries), and never ran.
	time.Sleep(5 * time.Second)
	p, err := cluster.Client().CoreV1().Pods(ns).Get(ctxT(t), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cs := p.Status.ContainerStatuses[0]
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CreateContainerConfigError" || cs.RestartCount != 0 ||
		cs.LastTerminationState.Terminated != nil || cs.ContainerID != "" {
		t.Errorf("app container ran: %+v", cs)
	}
	for _, e := range events(t, ns, pod.Name) {
		if strings.HasPrefix(e, "Started") && strings.Contains(e, "app") {
			t.Errorf("event %q", e)
		}
	}
	checkHostBait(t, bait)
}

// Content volumes are read-only in the container whatever readOnly says, so
// a container can neither write them nor repoint their ..data link.
func TestHostSafetyContentVolumesReadOnly(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	c := cluster.Client().CoreV1()
	if _, err := c.ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"},
		Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := busybox(ns, "ro", "sleep", "3600")
	pod.Spec.Volumes = []v1.Volume{
		{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
		{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "sec"}}},
		{Name: "down", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
		{Name: "cfg", MountPath: "/cfg", ReadOnly: false}, mount("sec", "/sec"), mount("down", "/down"),
		{Name: "cfg", MountPath: "/k", SubPath: "k"},
	}
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	for _, script := range []string{
		"echo x > /cfg/new", "echo x > /cfg/k", "ln -s /etc /cfg/..evil", "rm -f /cfg/..data", "mv /cfg/..data /cfg/..old",
		"echo x > /sec/new", "echo x > /down/name", "echo x > /k",
		"touch /var/run/secrets/kubernetes.io/serviceaccount/new",
	} {
		out, err := cluster.Kubectl(ctx, "-n", ns, "exec", pod.Name, "-c", "c", "--", "sh", "-c", script)
		if err == nil || !strings.Contains(out+err.Error(), "Read-only file system") {
			t.Errorf("%s: %q %v, want Read-only file system", script, out, err)
		}
	}
	if out := execIn(t, ns, pod.Name, "c", "cat", "/cfg/k", "/sec/k", "/down/name", "/k"); out != "vvrov" {
		t.Errorf("volume contents %q", out)
	}
}

// ..data tampered with on the host (what a container could do to a
// writable volume) is never followed by the refresh: a ConfigMap update
// leaves the bait it points at intact, and the volume ends correct.
func TestHostSafetyAtomicWriterTamper(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	c := cluster.Client().CoreV1()
	cm, err := c.ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data: map[string]string{"k": "v1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := busybox(ns, "tamper", "sleep", "3600")
	pod.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{mount("cfg", "/cfg")}
	created := cluster.CreatePod(t, pod)
	waitPhase(t, ns, pod.Name, v1.PodRunning)

	dir := filepath.Join(node.RootDir(), "pods", string(created.UID), "volumes", "kubernetes.io~configmap", "cfg")
	if _, err := os.Lstat(filepath.Join(dir, "..data")); err != nil {
		t.Fatalf("volume dir on the host: %v", err)
	}
	// ..data repointed at the bait by a relative path (what removal of "the
	// old payload dir" would delete), and a visible link at the bait file.
	bait := hostBait(t)
	rel, err := filepath.Rel(dir, bait)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, "..evil")
	if err := os.Symlink(rel, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	cm.Data["k"] = "v2"
	if _, err := c.ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	took := waitExecOutput(t, ns, pod.Name, "c", "v2", 2*time.Minute, "cat", "/cfg/k")
	t.Logf("volume correct again %v after the update", took.Round(time.Second))
	checkHostBait(t, bait)
	target, err := os.Readlink(filepath.Join(dir, "..data"))
	if err != nil || !regexp.MustCompile(`^\.\.\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d+$`).MatchString(target) {
		t.Errorf("..data -> %q %v", target, err)
	}
}

// Regressions: a subPath of a configMap shows its current content; subPaths
// of an emptyDir (new dirs, files, links inside the volume, subPathExpr)
// work; the binds go when the pod goes.
func TestHostSafetySubPathStillWorks(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	c := cluster.Client().CoreV1()
	cm, err := c.ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data: map[string]string{"k": "v1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data["k"] = "v2"
	if _, err := c.ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A hostPath's data must survive the pod's teardown of its subPath bind.
	hostDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(hostDir, "keep"), []byte("k"), 0o644); err != nil {
		t.Fatal(err)
	}
	pod := busybox(ns, "subpaths", "sleep", "3600")
	pod.Spec.InitContainers = []v1.Container{{Name: "prep", Image: images.BusyboxRef,
		Command:      []string{"sh", "-c", "mkdir -p /d/real && echo hi > /d/real/f && echo file > /d/plain && ln -s real /d/link"},
		VolumeMounts: []v1.VolumeMount{mount("d", "/d")}}}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}}},
		{Name: "d", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "h", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: hostDir}}},
	}
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "POD", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
		{Name: "cfg", MountPath: "/k", SubPath: "k"},
		{Name: "d", MountPath: "/d"},
		{Name: "d", MountPath: "/new", SubPath: "a/b"},
		{Name: "d", MountPath: "/plain", SubPath: "plain"},
		{Name: "d", MountPath: "/link", SubPath: "link"},
		{Name: "d", MountPath: "/expr", SubPathExpr: "per/$(POD)"},
		{Name: "h", MountPath: "/hsub", SubPath: "sub"},
	}
	created := cluster.CreatePod(t, pod)
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	script := "cat /k; cat /plain; cat /link/f; echo x > /new/n; cat /d/a/b/n; echo y > /expr/e; cat /d/per/subpaths/e; stat -c %a /d/a/b; echo h > /hsub/w"
	if out, want := execIn(t, ns, pod.Name, "c", "sh", "-c", script), "v2file\nhi\nx\ny\n777\n"; out != want {
		t.Errorf("%s:\n got %q\nwant %q", script, out, want)
	}

	podDir := filepath.Join(node.RootDir(), "pods", string(created.UID))
	if err := c.Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, ns, pod.Name)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Lstat(podDir)
		return os.IsNotExist(err), nil
	})
	if err != nil {
		t.Errorf("pod dir %s left", podDir)
	}
	if b, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(b), string(created.UID)) {
		t.Errorf("mounts of the pod left")
	}
	for _, f := range []string{"keep", "sub/w"} {
		if _, err := os.Stat(filepath.Join(hostDir, f)); err != nil {
			t.Errorf("hostPath data lost with the pod: %v", err)
		}
	}
}
