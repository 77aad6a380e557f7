// Package kubeletconfig reads the kubelet's configuration file as the
// kubelet does: a KubeletConfiguration (kubelet.config.k8s.io/v1beta1)
// decoded strictly, defaulted with the kubelet's defaults, the --config-dir
// drop-ins merged over it in the kubelet's order and way, validated with the
// kubelet's messages; and the kubelet's feature gates. It knows nothing of
// hostlet's flags: cmd/hostlet maps each field to the flag of the same
// setting and says what becomes of the fields hostlet does not implement.
package kubeletconfig

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// Kind is the one kind this package reads.
var Kind = kubeletv1beta1.SchemeGroupVersion.WithKind("KubeletConfiguration")

// DropinExtension is what a file in --config-dir must end with to be read.
const DropinExtension = ".conf"

// DefaultEvictionHard are the kubelet's hard eviction thresholds on Linux,
// used when the configuration has none (eviction.DefaultEvictionHard).
var DefaultEvictionHard = map[string]string{
	"memory.available":   "100Mi",
	"nodefs.available":   "10%",
	"nodefs.inodesFree":  "5%",
	"imagefs.available":  "15%",
	"imagefs.inodesFree": "5%",
}

// codecs decode strictly (an unknown or duplicate field is an error), as
// the kubelet's loader; lenient is its fallback.
var codecs, lenient = newCodecs()

func newCodecs() (strict, lenient serializer.CodecFactory) {
	scheme := runtime.NewScheme()
	if err := kubeletv1beta1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict), serializer.NewCodecFactory(scheme)
}

// HasTypeMeta says whether data (YAML or JSON) names an apiVersion or a
// kind: a versioned configuration, not hostlet's older flag-keyed file.
func HasTypeMeta(data []byte) (bool, error) {
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		return false, err
	}
	_, api := m["apiVersion"]
	_, kind := m["kind"]
	return api || kind, nil
}

// Decode reads one KubeletConfiguration as the kubelet's
// DecodeKubeletConfiguration: strictly, else (an unknown or duplicate
// field) leniently, the strict error returned as a warning to log.
// Nothing is defaulted.
func Decode(data []byte) (kc *kubeletv1beta1.KubeletConfiguration, warning string, err error) {
	obj, gvk, err := codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		if !runtime.IsStrictDecodingError(err) {
			return nil, "", fmt.Errorf("failed to decode: %w", err)
		}
		var lenientErr error
		obj, gvk, lenientErr = lenient.UniversalDeserializer().Decode(data, nil, nil)
		if lenientErr != nil {
			return nil, "", fmt.Errorf("failed lenient decoding: %v", err)
		}
		warning = fmt.Sprintf("Using lenient decoding as strict decoding failed: %v", err)
	}
	kc, ok := obj.(*kubeletv1beta1.KubeletConfiguration)
	if !ok {
		return nil, "", fmt.Errorf("failed to cast object to KubeletConfiguration, unexpected type: %v", gvk)
	}
	return kc, warning, nil
}

// LoadFile is the kubelet's loadConfigFile: the file decoded and defaulted,
// its relative paths made absolute against its directory, and the default
// hard eviction thresholds where it has none (or, with
// mergeDefaultEvictionSettings, where it lacks one).
func LoadFile(name string) (kc *kubeletv1beta1.KubeletConfiguration, warnings []string, err error) {
	fail := func(err error) error {
		return fmt.Errorf("failed to load kubelet config file, path: %s, error: %w", name, err)
	}
	abs, err := filepath.Abs(name)
	if err != nil {
		return nil, nil, fail(err)
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		return nil, nil, fail(fmt.Errorf("failed to read kubelet config file %q, error: %w", abs, err))
	}
	if len(data) == 0 {
		return nil, nil, fail(fmt.Errorf("kubelet config file %q was empty", abs))
	}
	kc, warning, err := Decode(data)
	if err != nil {
		return nil, nil, fail(err)
	}
	if warning != "" {
		warnings = append(warnings, abs+": "+warning)
	}
	SetDefaults(kc)
	resolveRelativePaths(kc, filepath.Dir(abs))
	// EvictionHard has no default of its own (it is OS-specific).
	if kc.EvictionHard == nil {
		kc.EvictionHard = copyMap(DefaultEvictionHard)
	} else if kc.MergeDefaultEvictionSettings != nil && *kc.MergeDefaultEvictionSettings {
		for k, v := range DefaultEvictionHard {
			if _, ok := kc.EvictionHard[k]; !ok {
				kc.EvictionHard[k] = v
			}
		}
	}
	return kc, warnings, nil
}

// Defaulted is the configuration of a kubelet given none: the kubelet's
// defaults, and its default hard eviction thresholds.
func Defaulted() *kubeletv1beta1.KubeletConfiguration {
	kc := &kubeletv1beta1.KubeletConfiguration{}
	SetDefaults(kc)
	kc.EvictionHard = copyMap(DefaultEvictionHard)
	return kc
}

// resolveRelativePaths makes the path fields absolute against root, as the
// kubelet's loader does (KubeletConfigurationPathRefs); an empty path stays
// empty.
func resolveRelativePaths(kc *kubeletv1beta1.KubeletConfiguration, root string) {
	paths := []*string{&kc.StaticPodPath, &kc.Authentication.X509.ClientCAFile, &kc.TLSCertFile,
		&kc.TLSPrivateKeyFile, kc.ResolverConfig, &kc.VolumePluginDir, &kc.PodLogsDir}
	for _, p := range paths {
		if p != nil && *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(root, *p)
		}
	}
}

// MergeDropins merges the drop-ins of dir over kc as the kubelet's
// mergeKubeletConfigurations: every *.conf file below dir, in lexical order
// of their paths, each a KubeletConfiguration applied as a JSON merge patch
// (RFC 7386: a field given replaces, a map merges key by key, null
// removes) to the defaulted configuration so far; the result is defaulted
// again. A drop-in's relative paths are not resolved (neither are the
// kubelet's). Warnings name the drop-ins' unknown fields.
func MergeDropins(kc *kubeletv1beta1.KubeletConfiguration, dir string) (warnings []string, err error) {
	base, err := json.Marshal(kc)
	if err != nil {
		return nil, fmt.Errorf("failed to marshal base config: %w", err)
	}
	walkErr := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || filepath.Ext(d.Name()) != DropinExtension {
			return nil
		}
		patch, warning, err := loadDropin(path)
		if err != nil {
			return err
		}
		if warning != "" {
			warnings = append(warnings, path+": "+warning)
		}
		merged, err := jsonpatch.MergePatch(base, patch)
		if err != nil {
			return fmt.Errorf("failed to merge drop-in and current config: %w", err)
		}
		base = merged
		return nil
	})
	if walkErr != nil {
		return nil, fmt.Errorf("failed to merge kubelet configs: failed to walk through kubelet dropin directory %q: %w", dir, walkErr)
	}
	merged := &kubeletv1beta1.KubeletConfiguration{}
	if err := json.Unmarshal(base, merged); err != nil {
		return nil, fmt.Errorf("failed to unmarshal merged JSON into kubelet configuration: %w", err)
	}
	SetDefaults(merged)
	*kc = *merged
	return warnings, nil
}

// loadDropin is one drop-in as JSON, which must name the kind and version
// (the kubelet refuses one without). It is decoded as a whole
// configuration too, so that its unknown fields are named, not dropped.
func loadDropin(path string) (patch []byte, warning string, err error) {
	fail := func(err error) error {
		return fmt.Errorf("failed to load kubelet dropin file, path: %s, error: %w", path, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fail(fmt.Errorf("failed to read drop-in kubelet config file %q, error: %w", path, err))
	}
	if len(data) == 0 {
		return nil, "", fail(fmt.Errorf("kubelet config file %q was empty", path))
	}
	patch, err = yaml.YAMLToJSON(data)
	if err != nil {
		return nil, "", fail(err)
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(patch, &meta); err != nil {
		return nil, "", fail(err)
	}
	gvk := schema.FromAPIVersionAndKind(meta.APIVersion, meta.Kind)
	if gvk.Empty() {
		return nil, "", fmt.Errorf("failed to load kubelet dropin file, path: %s, no apiVersion/kind", path)
	}
	if gvk != Kind {
		return nil, "", fmt.Errorf("failed to load kubelet dropin file, path: %s, unknown apiVersion/kind: %v", path, gvk.String())
	}
	if _, warning, err = Decode(data); err != nil {
		return nil, "", fail(err)
	}
	return patch, warning, nil
}

func copyMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
