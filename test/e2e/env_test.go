package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// envOf runs pod to completion and returns the environment its container
// printed with `env` (one VAR=value a line).
func envOf(t *testing.T, pod *v1.Pod) map[string]string {
	t.Helper()
	cluster.CreatePod(t, pod)
	waitPhase(t, pod.Namespace, pod.Name, v1.PodSucceeded)
	out, err := cluster.Kubectl(ctxT(t), "-n", pod.Namespace, "logs", pod.Name)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	return env
}

func fieldEnv(name, path string) v1.EnvVar {
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: path}}}
}

func resourceEnv(name, container, res, divisor string) v1.EnvVar {
	return v1.EnvVar{Name: name, ValueFrom: &v1.EnvVarSource{ResourceFieldRef: &v1.ResourceFieldSelector{
		ContainerName: container, Resource: res, Divisor: resource.MustParse(divisor)}}}
}

// Every kind of env source resolves to what the kubelet gives, including
// $(VAR) expansion in env, command and args, and the service variables.
func TestEnvSources(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	c := cluster.Client().CoreV1()
	if _, err := c.ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"},
		Data: map[string]string{"color": "blue", "data-1": "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Secrets(ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sec"},
		Data: map[string][]byte{"password": []byte("s3cr3t")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := c.Services(ns).Create(ctx, &v1.Service{ObjectMeta: metav1.ObjectMeta{Name: "my-svc"},
		Spec: v1.ServiceSpec{Ports: []v1.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Port: 53, Protocol: v1.ProtocolUDP}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kube, err := c.Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n, err := cluster.Client().CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	// env itself prints (a shell would drop names like CM_data-1); it also
	// shows $(VAR) expansion in command and args.
	pod := busybox(ns, "env", "env", "CMD=$(POD_NAME)")
	pod.Spec.Containers[0].Args = []string{"ARG=$(NS)", "env"}
	pod.Labels = map[string]string{"app": "envtest"}
	pod.Annotations = map[string]string{"note": "hi"}
	ct := &pod.Spec.Containers[0]
	ct.Resources = v1.ResourceRequirements{
		Limits:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m"), v1.ResourceMemory: resource.MustParse("64Mi")},
		Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("100m"), v1.ResourceMemory: resource.MustParse("32Mi")},
	}
	pod.Spec.Containers = append(pod.Spec.Containers, v1.Container{Name: "nolimits", Image: ct.Image, Command: []string{"true"}})
	ct = &pod.Spec.Containers[0]
	ct.EnvFrom = []v1.EnvFromSource{
		{Prefix: "CM_", ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}}},
		{SecretRef: &v1.SecretEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "sec"}}},
		{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "absent"}, Optional: &yes}},
	}
	ct.Env = []v1.EnvVar{
		fieldEnv("POD_NAME", "metadata.name"), fieldEnv("NS", "metadata.namespace"), fieldEnv("UID", "metadata.uid"),
		fieldEnv("LABEL", "metadata.labels['app']"), fieldEnv("ANN", "metadata.annotations['note']"),
		fieldEnv("NODE", "spec.nodeName"), fieldEnv("SA", "spec.serviceAccountName"),
		fieldEnv("POD_IP", "status.podIP"), fieldEnv("POD_IPS", "status.podIPs"),
		fieldEnv("HOST_IP", "status.hostIP"), fieldEnv("HOST_IPS", "status.hostIPs"),
		resourceEnv("CPU_LIMIT", "", "limits.cpu", "1m"), resourceEnv("MEM_LIMIT", "", "limits.memory", "1"),
		resourceEnv("CPU_REQ", "", "requests.cpu", "1m"), resourceEnv("MEM_REQ_MI", "", "requests.memory", "1Mi"),
		resourceEnv("OTHER_CPU_LIMIT", "nolimits", "limits.cpu", "1"), resourceEnv("OTHER_MEM_LIMIT", "nolimits", "limits.memory", "1"),
		{Name: "COLOR", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "color"}}},
		{Name: "PASS", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
			LocalObjectReference: v1.LocalObjectReference{Name: "sec"}, Key: "password"}}},
		{Name: "OPT", ValueFrom: &v1.EnvVarSource{SecretKeyRef: &v1.SecretKeySelector{
			LocalObjectReference: v1.LocalObjectReference{Name: "nope"}, Key: "k", Optional: &yes}}},
		{Name: "OPT_KEY", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "nokey", Optional: &yes}}},
		{Name: "EXPANDED", Value: "$(POD_NAME).$(COLOR) $$(POD_NAME) $(UNDEFINED) $(MY_SVC_SERVICE_PORT)"},
		{Name: "CM_color", Value: "overridden"},
	}
	env := envOf(t, pod)
	got, err := c.Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alloc := n.Status.Allocatable
	ip := svc.Spec.ClusterIP
	want := map[string]string{
		"POD_NAME": "env", "NS": ns, "UID": string(got.UID), "LABEL": "envtest", "ANN": "hi",
		"NODE": nodeName, "SA": "default", "POD_IP": got.Status.PodIP, "POD_IPS": got.Status.PodIP,
		"HOST_IP": "127.0.0.1", "HOST_IPS": "127.0.0.1",
		"CPU_LIMIT": "250", "MEM_LIMIT": "67108864", "CPU_REQ": "100", "MEM_REQ_MI": "32",
		"OTHER_CPU_LIMIT": fmt.Sprint(alloc.Cpu().Value()), "OTHER_MEM_LIMIT": fmt.Sprint(alloc.Memory().Value()),
		"COLOR": "blue", "PASS": "s3cr3t", "password": "s3cr3t", "CM_color": "overridden", "CM_data-1": "x",
		"EXPANDED": "env.blue $(POD_NAME) $(UNDEFINED) 80",
		"CMD":      "env", "ARG": ns,
		// Docker-links variables of the namespace's services and of default/kubernetes.
		"MY_SVC_SERVICE_HOST": ip, "MY_SVC_SERVICE_PORT": "80", "MY_SVC_SERVICE_PORT_HTTP": "80", "MY_SVC_SERVICE_PORT_DNS": "53",
		"MY_SVC_PORT": "tcp://" + ip + ":80", "MY_SVC_PORT_80_TCP": "tcp://" + ip + ":80", "MY_SVC_PORT_80_TCP_PROTO": "tcp",
		"MY_SVC_PORT_80_TCP_PORT": "80", "MY_SVC_PORT_80_TCP_ADDR": ip, "MY_SVC_PORT_53_UDP": "udp://" + ip + ":53",
		"MY_SVC_PORT_53_UDP_PROTO": "udp", "MY_SVC_PORT_53_UDP_PORT": "53", "MY_SVC_PORT_53_UDP_ADDR": ip,
		"KUBERNETES_SERVICE_HOST": kube.Spec.ClusterIP, "KUBERNETES_SERVICE_PORT": "443", "KUBERNETES_SERVICE_PORT_HTTPS": "443",
		"KUBERNETES_PORT": "tcp://" + kube.Spec.ClusterIP + ":443", "KUBERNETES_PORT_443_TCP_ADDR": kube.Spec.ClusterIP,
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	for _, k := range []string{"OPT", "OPT_KEY"} {
		if _, ok := env[k]; ok {
			t.Errorf("%s set from a missing optional source", k)
		}
	}

	// Without service links only the kubernetes service is announced.
	no := false
	quiet := busybox(ns, "nolinks", "env")
	quiet.Spec.EnableServiceLinks = &no
	env = envOf(t, quiet)
	if env["KUBERNETES_SERVICE_HOST"] != kube.Spec.ClusterIP {
		t.Errorf("KUBERNETES_SERVICE_HOST = %q without service links", env["KUBERNETES_SERVICE_HOST"])
	}
	if v, ok := env["MY_SVC_SERVICE_HOST"]; ok {
		t.Errorf("MY_SVC_SERVICE_HOST = %q with enableServiceLinks false", v)
	}
}

// A missing ConfigMap holds the container in CreateContainerConfigError with
// the kubelet's message; the pod starts by itself once it appears.
func TestEnvMissingConfigMapRecovers(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "waits", "sleep", "3600")
	pod.Spec.Containers[0].Env = []v1.EnvVar{{Name: "K", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
		LocalObjectReference: v1.LocalObjectReference{Name: "late"}, Key: "k"}}}}
	cluster.CreatePod(t, pod)
	p, err := cluster.WaitForPod(ctx, ns, pod.Name, time.Minute, func(p *v1.Pod) (bool, error) {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CreateContainerConfigError", nil
	})
	if err != nil {
		t.Fatalf("no CreateContainerConfigError: %v", err)
	}
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; msg != `configmap "late" not found` {
		t.Errorf("waiting message %q", msg)
	}
	if msg := waitEvent(t, ns, pod.Name, "Failed"); msg != `Error: configmap "late" not found` {
		t.Errorf("Failed event %q", msg)
	}
	created := time.Now()
	if _, err := cluster.Client().CoreV1().ConfigMaps(ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"},
		Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPhase(t, ns, pod.Name, v1.PodRunning)
	t.Logf("running %v after the ConfigMap appeared", time.Since(created).Round(time.Millisecond))
	if out := execIn(t, ns, pod.Name, "c", "sh", "-c", "echo $K"); out != "v\n" {
		t.Errorf("K = %q", out)
	}
}

// Pods read ConfigMaps from hostlet's watch of them: a pod created after an
// update sees the new value, and after a deletion an optional reference is
// skipped (a required one names the missing object).
func TestEnvFollowsConfigMapChanges(t *testing.T) {
	skipIfNoCluster(t)
	ctx := ctxT(t)
	ns := cluster.NewNamespace(t)
	cms := cluster.Client().CoreV1().ConfigMaps(ns)
	cm, err := cms.Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"k": "one"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	pod := func(name string, optional *bool) *v1.Pod {
		p := busybox(ns, name, "env")
		p.Spec.Containers[0].Env = []v1.EnvVar{{Name: "K", ValueFrom: &v1.EnvVarSource{ConfigMapKeyRef: &v1.ConfigMapKeySelector{
			LocalObjectReference: v1.LocalObjectReference{Name: "cfg"}, Key: "k", Optional: optional}}}}
		return p
	}
	if k := envOf(t, pod("first", nil))["K"]; k != "one" {
		t.Fatalf("first pod: K = %q, want one", k)
	}
	cm.Data["k"] = "two"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if k := envOf(t, pod("updated", nil))["K"]; k != "two" {
		t.Fatalf("pod created after the update: K = %q, want two", k)
	}
	if err := cms.Delete(ctx, "cfg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if env := envOf(t, pod("optional", &yes)); env["K"] != "" || env["PATH"] == "" {
		t.Fatalf("optional reference to a deleted ConfigMap: K = %q (env %v)", env["K"], env)
	}
	required := pod("required", nil)
	required.Spec.Containers[0].Command = []string{"sleep", "3600"}
	cluster.CreatePod(t, required)
	p, err := cluster.WaitForPod(ctx, ns, required.Name, time.Minute, func(p *v1.Pod) (bool, error) {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].State.Waiting != nil && cs[0].State.Waiting.Reason == "CreateContainerConfigError", nil
	})
	if err != nil {
		t.Fatalf("required reference to a deleted ConfigMap: %v", err)
	}
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; msg != `configmap "cfg" not found` {
		t.Errorf("waiting message %q", msg)
	}
}
