package staticpod

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

const manifest = `apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: c
    image: busybox
`

func decodeOne(t *testing.T, data, source string, isFile bool, node string) *v1.Pod {
	t.Helper()
	pods, err := Decode([]byte(data), source, isFile, node)
	if err != nil {
		t.Fatal(err)
	}
	if len(pods) != 1 {
		t.Fatalf("%d pods", len(pods))
	}
	return pods[0]
}

// A static pod gets the kubelet's identity: name with the node's (lower
// case), namespace default, the node, config.hash (its UID) and
// config.source, the NoExecute toleration (file only), phase Pending.
func TestDecodeIdentity(t *testing.T) {
	pod := decodeOne(t, manifest, "/etc/kubernetes/manifests/web.yaml", true, "Node-A")
	if pod.Name != "web-node-a" || pod.Namespace != "default" || pod.Spec.NodeName != "Node-A" {
		t.Errorf("identity %s/%s on %s", pod.Namespace, pod.Name, pod.Spec.NodeName)
	}
	if pod.UID == "" || pod.Annotations[ConfigHashAnnotation] != string(pod.UID) || pod.Annotations[ConfigSourceAnnotation] != FileSource {
		t.Errorf("annotations %v, uid %s", pod.Annotations, pod.UID)
	}
	if len(pod.UID) != 32 {
		t.Errorf("uid %q is not a 128-bit hash", pod.UID)
	}
	if len(pod.Spec.Tolerations) != 1 || pod.Spec.Tolerations[0].Operator != v1.TolerationOpExists || pod.Spec.Tolerations[0].Effect != v1.TaintEffectNoExecute {
		t.Errorf("tolerations %+v", pod.Spec.Tolerations)
	}
	if pod.Status.Phase != v1.PodPending || !IsStatic(pod) || IsMirror(pod) {
		t.Errorf("phase %s static %t", pod.Status.Phase, IsStatic(pod))
	}
	url := decodeOne(t, manifest, "http://example.com/pods", false, "node-a")
	if url.Annotations[ConfigSourceAnnotation] != HTTPSource || len(url.Spec.Tolerations) != 0 {
		t.Errorf("http pod: %v %+v", url.Annotations, url.Spec.Tolerations)
	}
	// An equal toleration is replaced, not added twice.
	tol := decodeOne(t, manifest+"  tolerations:\n  - operator: Exists\n    effect: NoExecute\n", "/m/web.yaml", true, "n")
	if len(tol.Spec.Tolerations) != 1 {
		t.Errorf("tolerations %+v", tol.Spec.Tolerations)
	}
}

// The UID is the same for the same content, node and source, and differs
// when any of them changes; YAML and JSON of one pod are one pod.
func TestDecodeUID(t *testing.T) {
	base := decodeOne(t, manifest, "/m/web.yaml", true, "n").UID
	json := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web"},"spec":{"containers":[{"name":"c","image":"busybox"}]}}`
	if got := decodeOne(t, json, "/m/web.yaml", true, "n").UID; got != base {
		t.Errorf("JSON gives %s, YAML %s", got, base)
	}
	// Defaults spelled out are the same pod as defaults left out.
	explicit := manifest + "  restartPolicy: Always\n  terminationGracePeriodSeconds: 30\n"
	if got := decodeOne(t, explicit, "/m/web.yaml", true, "n").UID; got != base {
		t.Errorf("explicit defaults give %s, want %s", got, base)
	}
	for name, uid := range map[string]string{
		"edited":      string(decodeOne(t, strings.Replace(manifest, "busybox", "busybox:2", 1), "/m/web.yaml", true, "n").UID),
		"other file":  string(decodeOne(t, manifest, "/m/other.yaml", true, "n").UID),
		"other node":  string(decodeOne(t, manifest, "/m/web.yaml", true, "m").UID),
		"from a URL":  string(decodeOne(t, manifest, "/m/web.yaml", false, "n").UID),
		"another url": string(decodeOne(t, manifest, "http://x/", false, "n").UID),
	} {
		if uid == string(base) {
			t.Errorf("%s: same UID %s", name, uid)
		}
	}
	// A UID given in the manifest is kept.
	given := decodeOne(t, strings.Replace(manifest, "name: web\n", "name: web\n  uid: abc\n", 1), "/m/web.yaml", true, "n")
	if given.UID != "abc" {
		t.Errorf("uid %s", given.UID)
	}
}

// What the API server's defaults give a pod, the manifest gets.
func TestDecodeDefaults(t *testing.T) {
	pod := decodeOne(t, manifest+`    ports:
    - containerPort: 80
    livenessProbe:
      httpGet:
        port: 80
    resources:
      limits:
        cpu: 100m
  - name: d
    image: busybox:1.36
  priorityClassName: system-node-critical
  volumes:
  - name: scratch
`, "/m/web.yaml", true, "n")
	s := pod.Spec
	if s.RestartPolicy != v1.RestartPolicyAlways || s.DNSPolicy != v1.DNSClusterFirst || *s.TerminationGracePeriodSeconds != 30 ||
		s.SchedulerName != v1.DefaultSchedulerName || !*s.EnableServiceLinks || s.SecurityContext == nil {
		t.Errorf("pod defaults %+v", s)
	}
	if s.Priority == nil || *s.Priority != 2000001000 {
		t.Errorf("priority %v", s.Priority)
	}
	c := s.Containers[0]
	if c.ImagePullPolicy != v1.PullAlways || s.Containers[1].ImagePullPolicy != v1.PullIfNotPresent ||
		c.TerminationMessagePath != "/dev/termination-log" || c.Ports[0].Protocol != v1.ProtocolTCP {
		t.Errorf("container defaults %+v", c)
	}
	if p := c.LivenessProbe; p.PeriodSeconds != 10 || p.TimeoutSeconds != 1 || p.FailureThreshold != 3 || p.HTTPGet.Path != "/" || p.HTTPGet.Scheme != v1.URISchemeHTTP {
		t.Errorf("probe defaults %+v", p)
	}
	if q := c.Resources.Requests[v1.ResourceCPU]; q.String() != "100m" {
		t.Errorf("requests %v", c.Resources.Requests)
	}
	if s.Volumes[0].EmptyDir == nil {
		t.Errorf("volume %+v", s.Volumes[0])
	}
}

// Bad manifests are refused with the kubelet's reasons, API references
// among them (PreventStaticPodAPIReferences).
func TestDecodeRefused(t *testing.T) {
	for name, tc := range map[string]struct{ data, want string }{
		"not yaml":        {"{", "JSON"},
		"not a pod":       {"apiVersion: v1\nkind: Service\nmetadata:\n  name: x\n", "is not a v1 Pod"},
		"no name":         {"apiVersion: v1\nkind: Pod\nspec:\n  containers: [{name: c, image: i}]\n", "name is needed"},
		"unknown field":   {manifest + "  bogus: 1\n", "bogus"},
		"no containers":   {"apiVersion: v1\nkind: Pod\nmetadata:\n  name: x\n", "spec.containers: Required value"},
		"no image":        {strings.Replace(manifest, "image: busybox", "image: ''", 1), "image: Required value"},
		"service account": {manifest + "  serviceAccountName: default\n", "static pods may not reference serviceaccounts"},
		"secret volume":   {manifest + "  volumes:\n  - name: s\n    secret:\n      secretName: x\n", "static pods may not reference secrets"},
		"configmap env":   {manifest + "    envFrom:\n    - configMapRef:\n        name: x\n", "static pods may not reference configmaps"},
		"pull secret":     {manifest + "  imagePullSecrets:\n  - name: x\n", "static pods may not reference secrets"},
		"pvc":             {manifest + "  volumes:\n  - name: s\n    persistentVolumeClaim:\n      claimName: x\n", "static pods may not reference persistentvolumeclaims"},
		"token":           {manifest + "  volumes:\n  - name: s\n    projected:\n      sources:\n      - serviceAccountToken:\n          path: t\n", "serviceaccounts (via projected volumes)"},
		"list from file":  {"apiVersion: v1\nkind: PodList\nitems: []\n", "is not a v1 Pod"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode([]byte(tc.data), "/m/x.yaml", true, "n")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
	// A URL may serve a PodList.
	list := "apiVersion: v1\nkind: PodList\nitems:\n- metadata:\n    name: a\n  spec:\n    containers: [{name: c, image: i}]\n- metadata:\n    name: b\n  spec:\n    containers: [{name: c, image: i}]\n"
	pods, err := Decode([]byte(list), "http://x/", false, "n")
	if err != nil || len(pods) != 2 || pods[0].Name != "a-n" || pods[1].Name != "b-n" {
		t.Errorf("list: %v %v", pods, err)
	}
}

// A mirror pod is the static pod with config.mirror (its hash), no UID,
// owned by the Node; MirrorOf and SamePod recognise it.
func TestMirror(t *testing.T) {
	pod := decodeOne(t, manifest, "/m/web.yaml", true, "n")
	node := &v1.Node{}
	node.Name, node.UID = "n", "node-uid"
	m := Mirror(pod, node)
	if m.UID != "" || m.Annotations[ConfigMirrorAnnotation] != string(pod.UID) || m.Annotations[ConfigHashAnnotation] != string(pod.UID) {
		t.Errorf("mirror %+v", m.ObjectMeta)
	}
	if len(m.OwnerReferences) != 1 || m.OwnerReferences[0].UID != "node-uid" || m.OwnerReferences[0].Kind != "Node" || !*m.OwnerReferences[0].Controller {
		t.Errorf("owners %+v", m.OwnerReferences)
	}
	if _, ok := pod.Annotations[ConfigMirrorAnnotation]; ok {
		t.Error("the static pod was changed")
	}
	m.UID = "api-uid"
	if !IsMirror(m) || !MirrorOf(m, pod.UID) || !SamePod(m, pod.UID) || !SamePod(m, "api-uid") || SamePod(m, "other") ||
		StaticUID(m) != pod.UID || MirrorOf(pod, pod.UID) {
		t.Error("mirror not recognised")
	}
}

// Over the sources, in order, the first pod of a full name wins.
func TestMerge(t *testing.T) {
	a := decodeOne(t, manifest, "/m/a.yaml", true, "n")
	b := decodeOne(t, manifest, "/m/b.yaml", true, "n")
	u := decodeOne(t, strings.Replace(manifest, "name: web", "name: api", 1), "http://x/", false, "n")
	want, dups := merge([]string{FileSource, HTTPSource}, map[string][]*v1.Pod{FileSource: {a, b}, HTTPSource: {u}})
	if len(want) != 2 || want["default/web-n"] != a || want["default/api-n"] != u || len(dups) != 1 || dups[0] != b {
		t.Errorf("want %v dups %v", want, dups)
	}
}
