package e2e

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

func ptr[T any](v T) *T { return &v }

func mount(name, path string) v1.VolumeMount { return v1.VolumeMount{Name: name, MountPath: path} }

// waitExecOutput polls cmd in the container until its output is want.
func waitExecOutput(t *testing.T, ns, pod, container, want string, timeout time.Duration, cmd ...string) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	err := wait.PollUntilContextTimeout(ctxT(t), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		last, _ = cluster.Kubectl(ctx, append([]string{"-n", ns, "exec", pod, "-c", container, "--"}, cmd...)...)
		return last == want, nil
	})
	if err != nil {
		t.Fatalf("%v in %s/%s: %q, want %q", cmd, ns, pod, last, want)
	}
	return time.Since(start)
}

// ConfigMap, Secret, downward API, projected token and emptyDir volumes
// have the kubelet's layout, modes and media; updates reach them.
func TestVolumesContent(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	c := cluster.Client().CoreV1()
	cm, err := c.ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data: map[string]string{"a": "one", "b": "two"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sec, err := c.Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"},
		Data: map[string][]byte{"user": []byte("admin")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := busybox(ns, "vols", "sleep", "3600")
	pod.Labels = map[string]string{"app": "vols"}
	pod.Spec.RestartPolicy = v1.RestartPolicyAlways
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Mi")}
	pod.Spec.Volumes = []v1.Volume{
		{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, DefaultMode: ptr(int32(0o400))}}},
		{Name: "items", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"},
			Items:                []v1.KeyToPath{{Key: "b", Path: "sub/dir/b.txt", Mode: ptr(int32(0o600))}}}}},
		{Name: "sec", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "sec"}}},
		{Name: "opt", VolumeSource: v1.VolumeSource{Secret: &v1.SecretVolumeSource{SecretName: "absent", Optional: ptr(true)}}},
		{Name: "down", VolumeSource: v1.VolumeSource{DownwardAPI: &v1.DownwardAPIVolumeSource{Items: []v1.DownwardAPIVolumeFile{
			{Path: "labels", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.labels"}},
			{Path: "name", FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}},
			{Path: "mem", ResourceFieldRef: &v1.ResourceFieldSelector{ContainerName: "c", Resource: "limits.memory", Divisor: resource.MustParse("1Mi")}},
		}}}},
		{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
			{ServiceAccountToken: &v1.ServiceAccountTokenProjection{Audience: "e2e-aud", ExpirationSeconds: ptr(int64(600)), Path: "tok"}},
		}}}},
		{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
		{Name: "mem", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{
			Medium: v1.StorageMediumMemory, SizeLimit: ptr(resource.MustParse("16Mi"))}}},
	}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{
		mount("cfg", "/cfg"), mount("items", "/items"), mount("sec", "/sec"), mount("opt", "/opt"),
		mount("down", "/down"), mount("token", "/token"), mount("scratch", "/scratch"), mount("mem", "/mem"),
	}
	cluster.CreatePod(t, pod)
	waitReady(t, ns, pod.Name)
	sh := func(script string) string { return execIn(t, ns, pod.Name, "c", "sh", "-c", script) }

	checks := []struct{ script, want string }{
		{"cat /cfg/a /cfg/b", "onetwo"},
		{"stat -L -c %a /cfg/a", "400\n"},
		{"readlink /cfg/a; readlink /cfg/..data | grep -c '^\\.\\.20'", "..data/a\n1\n"},
		{"cat /items/sub/dir/b.txt; stat -L -c %a /items/sub/dir/b.txt; ls /items", "two600\nsub\n"},
		{"cat /sec/user; stat -L -c %a /sec/user; stat -f -c %T /sec", "admin644\ntmpfs\n"},
		{"ls -A /opt | grep -v '^\\.\\.' | wc -l", "0\n"},
		{"cat /down/labels; echo; cat /down/name; echo; cat /down/mem", "app=\"vols\"\nvols\n64"},
		{"stat -f -c %T /token; stat -L -c %a /token/tok", "tmpfs\n644\n"},
		// The default kube-api-access volume of every pod.
		{"cd /var/run/secrets/kubernetes.io/serviceaccount && ls && cat namespace", "ca.crt\nnamespace\ntoken\n" + ns},
		{"stat -c %a /scratch; stat -f -c %T /scratch", "777\next2/ext3\n"},
		{"stat -f -c %T /mem; df -k /mem | tail -1 | awk '{print $2}'", "tmpfs\n16384\n"},
	}
	for _, ck := range checks {
		if got := sh(ck.script); got != ck.want {
			if ck.want == "777\next2/ext3\n" && strings.HasPrefix(got, "777\n") {
				continue // emptyDir on disk: whatever file system the root dir is on
			}
			t.Errorf("%s:\n got %q\nwant %q", ck.script, got, ck.want)
		}
	}

	// The mounted token is bound to the pod and the audience it asked for.
	tok := sh("cat /token/tok")
	tr, err := cluster.Client().AuthenticationV1().TokenReviews().Create(ctx, &authv1.TokenReview{
		Spec: authv1.TokenReviewSpec{Token: tok, Audiences: []string{"e2e-aud"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Status.Authenticated || tr.Status.User.Username != "system:serviceaccount:"+ns+":default" ||
		strings.Join(tr.Status.User.Extra["authentication.kubernetes.io/pod-name"], "") != pod.Name {
		t.Errorf("token review: %+v", tr.Status)
	}

	// Updates reach the mounted files (not immediately: the kubelet's resync).
	cm.Data["a"] = "uno"
	if _, err := c.ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	sec.Data["user"] = []byte("root")
	if _, err := c.Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	took := waitExecOutput(t, ns, pod.Name, "c", "uno", 2*time.Minute, "cat", "/cfg/a")
	t.Logf("ConfigMap update visible after %v", took.Round(time.Second))
	waitExecOutput(t, ns, pod.Name, "c", "root", 30*time.Second, "cat", "/sec/user")

	// A label change reaches the downward API file promptly.
	if _, err := c.Pods(ns).Patch(ctx, pod.Name, "application/merge-patch+json",
		[]byte(`{"metadata":{"labels":{"app":"changed"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	took = waitExecOutput(t, ns, pod.Name, "c", "app=\"changed\"", time.Minute, "cat", "/down/labels")
	t.Logf("label update visible after %v", took.Round(time.Millisecond))
}

// A pod whose ConfigMap volume is missing stays ContainerCreating with a
// FailedMount event, and starts by itself once the ConfigMap exists.
func TestVolumeMissingConfigMapRecovers(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "mountwait", "sleep", "3600")
	pod.Spec.Volumes = []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
		LocalObjectReference: v1.LocalObjectReference{Name: "later"}}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{mount("cfg", "/cfg")}
	cluster.CreatePod(t, pod)
	msg := waitEvent(t, ns, pod.Name, "FailedMount")
	if want := `MountVolume.SetUp failed for volume "cfg" : configmap "later" not found`; msg != want {
		t.Errorf("FailedMount %q, want %q", msg, want)
	}
	p, err := cluster.Client().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Status.Phase != v1.PodPending || len(p.Status.ContainerStatuses) != 1 ||
		p.Status.ContainerStatuses[0].State.Waiting == nil || p.Status.ContainerStatuses[0].State.Waiting.Reason != "ContainerCreating" {
		t.Errorf("pod status while the volume is missing: %s %+v", p.Status.Phase, p.Status.ContainerStatuses)
	}
	created := time.Now()
	if _, err := cluster.Client().CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"},
		Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	t.Logf("running %v after the ConfigMap appeared", time.Since(created).Round(time.Millisecond))
	if out := execIn(t, ns, pod.Name, "c", "cat", "/cfg/k"); out != "v" {
		t.Errorf("/cfg/k = %q", out)
	}
}

// A projected token is replaced at 80 % of its life (600 s is the shortest
// the apiserver issues, so this takes 8 minutes: HOSTLET_E2E_SLOW=1).
func TestVolumeTokenRefresh(t *testing.T) {
	skipIfNoCluster(t)
	if os.Getenv("HOSTLET_E2E_SLOW") == "" {
		t.Skip("takes 8 minutes; set HOSTLET_E2E_SLOW=1")
	}
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "tokens", "sleep", "3600")
	pod.Spec.Volumes = []v1.Volume{{Name: "token", VolumeSource: v1.VolumeSource{Projected: &v1.ProjectedVolumeSource{Sources: []v1.VolumeProjection{
		{ServiceAccountToken: &v1.ServiceAccountTokenProjection{ExpirationSeconds: ptr(int64(600)), Path: "tok"}},
	}}}}}
	pod.Spec.Containers[0].VolumeMounts = []v1.VolumeMount{mount("token", "/token")}
	cluster.CreatePod(t, pod)
	waitReady(t, ns, pod.Name)
	first := execIn(t, ns, pod.Name, "c", "cat", "/token/tok")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 11*time.Minute)
	defer cancel()
	var cur string
	err := wait.PollUntilContextCancel(ctx, 5*time.Second, false, func(ctx context.Context) (bool, error) {
		cur, _ = cluster.Kubectl(ctx, "-n", ns, "exec", pod.Name, "--", "cat", "/token/tok")
		return cur != "" && cur != first, nil
	})
	if err != nil {
		t.Fatalf("token not refreshed in %v", time.Since(start))
	}
	t.Logf("token refreshed after %v", time.Since(start).Round(time.Second))
	tr, err := cluster.Client().AuthenticationV1().TokenReviews().Create(ctx, &authv1.TokenReview{
		Spec: authv1.TokenReviewSpec{Token: cur}}, metav1.CreateOptions{})
	if err != nil || !tr.Status.Authenticated {
		t.Fatalf("refreshed token does not authenticate: %v %+v", err, tr)
	}
}
