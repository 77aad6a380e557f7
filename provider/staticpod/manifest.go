// Package staticpod is the kubelet's second source of pods: static pods read
// from manifests in a file or directory (--pod-manifest-path) or at a URL
// (--manifest-url), run by this node without the API server, and their
// mirror pods, through which the API sees them. As the kubelet's
// pkg/kubelet/config (file, http, the merge of sources) and pkg/kubelet/pod
// (the mirror client).
package staticpod

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// The kubelet's annotations on static pods and their mirrors
// (pkg/kubelet/types).
const (
	ConfigSourceAnnotation    = "kubernetes.io/config.source"
	ConfigHashAnnotation      = "kubernetes.io/config.hash"
	ConfigFirstSeenAnnotation = "kubernetes.io/config.seen"
	ConfigMirrorAnnotation    = v1.MirrorPodAnnotationKey
)

// The sources of static pods, as the kubelet names them in
// config.source.
const (
	FileSource = "file"
	HTTPSource = "http"
)

// maxConfigLength bounds a manifest (the kubelet's 10 MB).
const maxConfigLength = 10 << 20

// IsStatic tells a static pod: one whose source is not the API server.
func IsStatic(pod *v1.Pod) bool {
	src := pod.Annotations[ConfigSourceAnnotation]
	return src == FileSource || src == HTTPSource
}

// IsMirror tells a mirror pod: the API's copy of a static pod.
func IsMirror(pod *v1.Pod) bool {
	_, ok := pod.Annotations[ConfigMirrorAnnotation]
	return ok
}

// MirrorOf tells whether mirror is the mirror of the static pod with UID
// uid (its config.mirror annotation is the static pod's hash, which is its
// UID), as the kubelet's IsMirrorPodOf.
func MirrorOf(mirror *v1.Pod, uid types.UID) bool {
	h, ok := mirror.Annotations[ConfigMirrorAnnotation]
	return ok && h == string(uid)
}

// SamePod tells whether api, an API object, is the node's pod of UID uid:
// the pod itself or, for a static pod, its mirror.
func SamePod(api *v1.Pod, uid types.UID) bool {
	return api.UID == uid || MirrorOf(api, uid)
}

// StaticUID is the UID of the static pod a mirror pod stands for, or "".
func StaticUID(mirror *v1.Pod) types.UID {
	return types.UID(mirror.Annotations[ConfigMirrorAnnotation])
}

// FullName is the kubelet's pod full name, "<name>_<namespace>"; two static
// pods of one full name never run at once.
func FullName(pod *v1.Pod) string { return pod.Name + "_" + pod.Namespace }

// PodName is the name the kubelet gives a static pod: the manifest's name
// and the node's, so that it is unique among nodes.
func PodName(name, nodeName string) string {
	return fmt.Sprintf("%s-%s", name, strings.ToLower(nodeName))
}

// Decode reads a manifest: one pod (YAML or JSON) or, from a URL, a
// PodList too, as the kubelet's tryDecodeSinglePod and tryDecodePodList.
// Each pod is defaulted and given its static identity (applyDefaults).
func Decode(data []byte, source string, isFile bool, nodeName string) ([]*v1.Pod, error) {
	if len(data) > maxConfigLength {
		return nil, fmt.Errorf("manifest is larger than %d bytes", maxConfigLength)
	}
	js, err := utilyaml.ToJSON(data)
	if err != nil {
		return nil, err
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(js, &tm); err != nil {
		return nil, err
	}
	var items []v1.Pod
	switch {
	case tm.Kind == "Pod" && (tm.APIVersion == "v1" || tm.APIVersion == ""):
		var pod v1.Pod
		if err := strictUnmarshal(js, &pod); err != nil {
			return nil, fmt.Errorf("couldn't parse as pod: %w", err)
		}
		items = []v1.Pod{pod}
	case tm.Kind == "PodList" && !isFile && (tm.APIVersion == "v1" || tm.APIVersion == ""):
		var list v1.PodList
		if err := strictUnmarshal(js, &list); err != nil {
			return nil, fmt.Errorf("couldn't parse as a list of pods: %w", err)
		}
		items = list.Items
	default:
		return nil, fmt.Errorf("couldn't parse as pod: kind %q, apiVersion %q is not a v1 Pod", tm.Kind, tm.APIVersion)
	}
	out := make([]*v1.Pod, 0, len(items))
	for i := range items {
		pod := &items[i]
		if pod.Name == "" {
			return nil, errors.New("invalid pod: name is needed for the pod")
		}
		SetDefaults(pod)
		if err := ApplyIdentity(pod, source, isFile, nodeName); err != nil {
			return nil, err
		}
		if err := Validate(pod); err != nil {
			return nil, err
		}
		out = append(out, pod)
	}
	return out, nil
}

// strictUnmarshal refuses unknown fields, as the API server's strict
// decoding would warn of them: a typo in a manifest is a clear error, not
// a field silently dropped.
func strictUnmarshal(js []byte, into any) error {
	return yaml.UnmarshalStrict(js, into)
}

// ApplyIdentity gives a decoded pod what the kubelet's applyDefaults gives
// a static pod: a UID hashed from its content, the node and the source (the
// same manifest at the same place is the same pod across restarts; an edit
// is a new pod), the name <name>-<node>, namespace default if unset, the
// node, the config.hash annotation (the UID), the NoExecute toleration of
// a file's pod, phase Pending.
func ApplyIdentity(pod *v1.Pod, source string, isFile bool, nodeName string) error {
	if pod.UID == "" {
		uid, err := hashUID(pod, source, isFile, nodeName)
		if err != nil {
			return err
		}
		pod.UID = uid
	}
	pod.Name = PodName(pod.Name, nodeName)
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	pod.Spec.NodeName = nodeName
	if pod.Annotations == nil {
		pod.Annotations = map[string]string{}
	}
	pod.Annotations[ConfigHashAnnotation] = string(pod.UID)
	if isFile {
		pod.Annotations[ConfigSourceAnnotation] = FileSource
		// So that node problems (NoExecute taints) never evict it.
		addOrUpdateToleration(pod, v1.Toleration{Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute})
	} else {
		pod.Annotations[ConfigSourceAnnotation] = HTTPSource
	}
	pod.Status.Phase = v1.PodPending
	return nil
}

// hashUID is the kubelet's generated UID: FNV-128a of the decoded,
// defaulted pod, then "host:<node>" and "file:<path>" for a file or
// "url:<url>" for a URL. The kubelet hashes its internal type's dump; this
// hashes the v1 pod's JSON, so the UIDs differ from a kubelet's, but have
// its property: the same content at the same place is the same pod.
func hashUID(pod *v1.Pod, source string, isFile bool, nodeName string) (types.UID, error) {
	b, err := json.Marshal(pod)
	if err != nil {
		return "", err
	}
	h := fnv.New128a()
	h.Write(b)
	if isFile {
		fmt.Fprintf(h, "host:%s", nodeName)
		fmt.Fprintf(h, "file:%s", source)
	} else {
		fmt.Fprintf(h, "url:%s", source)
	}
	return types.UID(hex.EncodeToString(h.Sum(nil))), nil
}

// addOrUpdateToleration is the kubelet's helper.AddOrUpdateTolerationInPod:
// an equal toleration is replaced, else it is added.
func addOrUpdateToleration(pod *v1.Pod, t v1.Toleration) {
	for i := range pod.Spec.Tolerations {
		if pod.Spec.Tolerations[i].MatchToleration(&t) {
			pod.Spec.Tolerations[i] = t
			return
		}
	}
	pod.Spec.Tolerations = append(pod.Spec.Tolerations, t)
}

// Validate refuses what the kubelet refuses in a static pod: what pod
// validation catches first (names, containers, images) and, with
// PreventStaticPodAPIReferences (beta, on), any reference to an API
// object: a static pod runs without the API server.
func Validate(pod *v1.Pod) error {
	var errs []string
	for _, e := range validation.IsDNS1123Subdomain(pod.Name) {
		errs = append(errs, fmt.Sprintf("metadata.name: %q: %s", pod.Name, e))
	}
	for _, e := range validation.IsDNS1123Label(pod.Namespace) {
		errs = append(errs, fmt.Sprintf("metadata.namespace: %q: %s", pod.Namespace, e))
	}
	if len(pod.Spec.Containers) == 0 {
		errs = append(errs, "spec.containers: Required value")
	}
	seen := map[string]bool{}
	check := func(field string, name, image string) {
		for _, e := range validation.IsDNS1123Label(name) {
			errs = append(errs, fmt.Sprintf("%s.name: %q: %s", field, name, e))
		}
		if seen[name] {
			errs = append(errs, fmt.Sprintf("%s.name: Duplicate value: %q", field, name))
		}
		seen[name] = true
		if strings.TrimSpace(image) == "" {
			errs = append(errs, field+".image: Required value")
		}
	}
	for i, c := range pod.Spec.InitContainers {
		check(fmt.Sprintf("spec.initContainers[%d]", i), c.Name, c.Image)
	}
	for i, c := range pod.Spec.Containers {
		check(fmt.Sprintf("spec.containers[%d]", i), c.Name, c.Image)
	}
	if len(pod.Spec.EphemeralContainers) > 0 {
		errs = append(errs, "spec.ephemeralContainers: Forbidden: cannot be set on create")
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid pod: %s", strings.Join(errs, ", "))
	}
	if resource := apiReference(pod); resource != "" {
		return fmt.Errorf("static pods may not reference %s", resource)
	}
	return nil
}

// apiReference is the kind of API object a pod refers to, or "": the
// kubelet's podutil.HasAPIObjectReference.
func apiReference(pod *v1.Pod) string {
	spec := &pod.Spec
	if spec.ServiceAccountName != "" || spec.DeprecatedServiceAccount != "" {
		return "serviceaccounts"
	}
	if len(spec.ImagePullSecrets) > 0 {
		return "secrets"
	}
	var secrets, configMaps bool
	visit := func(cs []v1.Container) {
		for _, c := range cs {
			for _, f := range c.EnvFrom {
				secrets = secrets || f.SecretRef != nil
				configMaps = configMaps || f.ConfigMapRef != nil
			}
			for _, e := range c.Env {
				if e.ValueFrom != nil {
					secrets = secrets || e.ValueFrom.SecretKeyRef != nil
					configMaps = configMaps || e.ValueFrom.ConfigMapKeyRef != nil
				}
			}
		}
	}
	visit(spec.InitContainers)
	visit(spec.Containers)
	for _, v := range spec.Volumes {
		secrets = secrets || v.Secret != nil || (v.CephFS != nil && v.CephFS.SecretRef != nil) ||
			(v.FlexVolume != nil && v.FlexVolume.SecretRef != nil) || (v.RBD != nil && v.RBD.SecretRef != nil) ||
			(v.ISCSI != nil && v.ISCSI.SecretRef != nil) || (v.ScaleIO != nil && v.ScaleIO.SecretRef != nil) ||
			(v.StorageOS != nil && v.StorageOS.SecretRef != nil) || (v.CSI != nil && v.CSI.NodePublishSecretRef != nil)
	}
	switch {
	case secrets:
		return "secrets"
	case configMaps:
		return "configmaps"
	case len(spec.ResourceClaims) > 0:
		return "resourceclaims"
	}
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil:
			return "configmaps (via configmap volumes)"
		case v.CSI != nil:
			return "csidrivers (via CSI volumes)"
		case v.Glusterfs != nil:
			return "endpoints (via glusterFS volumes)"
		case v.PersistentVolumeClaim != nil:
			return "persistentvolumeclaims"
		case v.Ephemeral != nil:
			return "persistentvolumeclaims (via ephemeral volumes)"
		case v.AzureFile != nil:
			return "secrets (via azureFile volumes)"
		case v.Projected != nil:
			for _, s := range v.Projected.Sources {
				switch {
				case s.ConfigMap != nil:
					return "configmaps (via projected volumes)"
				case s.Secret != nil:
					return "secrets (via projected volumes)"
				case s.ServiceAccountToken != nil:
					return "serviceaccounts (via projected volumes)"
				case s.ClusterTrustBundle != nil:
					return "clustertrustbundles"
				case s.PodCertificate != nil:
					return "podcertificates"
				}
			}
		}
	}
	return ""
}
