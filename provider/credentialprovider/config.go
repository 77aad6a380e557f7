package credentialprovider

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	configv1 "k8s.io/kubelet/config/v1"
	configv1alpha1 "k8s.io/kubelet/config/v1alpha1"
	configv1beta1 "k8s.io/kubelet/config/v1beta1"
	credentialproviderv1 "k8s.io/kubelet/pkg/apis/credentialprovider/v1"
	"sigs.k8s.io/yaml"
)

// The response versions a provider may ask for, as the kubelet's apiVersions.
var apiVersions = sets.New(
	"credentialprovider.kubelet.k8s.io/v1alpha1",
	"credentialprovider.kubelet.k8s.io/v1beta1",
	credentialproviderv1.SchemeGroupVersion.String(),
)

const configGroup = "kubelet.config.k8s.io"

// ReadConfig reads a CredentialProviderConfig file, or a directory of them
// (its *.json, *.yaml and *.yml in lexical order, their providers merged, a
// name twice refused), as the kubelet's readCredentialProviderConfig. Each
// file is decoded strictly in its own version (kubelet.config.k8s.io v1,
// v1beta1 or v1alpha1) and returned as v1, whose fields are theirs.
func ReadConfig(path string) (*configv1.CredentialProviderConfig, error) {
	cfg, _, err := readConfig(path)
	return cfg, err
}

// readConfig is ReadConfig and the kubelet's hash of the files read
// ("sha256:<hex>" over each length-prefixed content), which its
// credential_provider_config_info metric shows.
func readConfig(path string) (*configv1.CredentialProviderConfig, string, error) {
	if path == "" {
		return nil, "", fmt.Errorf("credential provider config path is empty")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, "", fmt.Errorf("unable to access path %q: %w", path, err)
	}
	files := []string{path}
	if fi.IsDir() {
		entries, err := os.ReadDir(path)
		if err != nil {
			return nil, "", fmt.Errorf("unable to read directory %q: %w", path, err)
		}
		files = nil
		for _, e := range entries {
			if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".json" || ext == ".yaml" || ext == ".yml") {
				files = append(files, filepath.Join(path, e.Name()))
			}
		}
		sort.Strings(files)
		if len(files) == 0 {
			return nil, "", fmt.Errorf("no configuration files found in directory %q", path)
		}
	}
	merged := &configv1.CredentialProviderConfig{}
	merged.APIVersion, merged.Kind = configv1.SchemeGroupVersion.String(), "CredentialProviderConfig"
	seen := sets.New[string]()
	hash := sha256.New()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, "", fmt.Errorf("unable to read file %q: %w", f, err)
		}
		_ = binary.Write(hash, binary.BigEndian, uint64(len(data)))
		hash.Write(data)
		cfg, err := decodeConfig(data)
		if err != nil {
			return nil, "", fmt.Errorf("error decoding config %q: %w", f, err)
		}
		for _, p := range cfg.Providers {
			if seen.Has(p.Name) {
				return nil, "", fmt.Errorf("duplicate provider name %q found in configuration file(s)", p.Name)
			}
			seen.Insert(p.Name)
			merged.Providers = append(merged.Providers, p)
		}
	}
	return merged, fmt.Sprintf("sha256:%x", hash.Sum(nil)), nil
}

func decodeConfig(data []byte) (*configv1.CredentialProviderConfig, error) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(data, &tm); err != nil {
		return nil, err
	}
	group, _, _ := strings.Cut(tm.APIVersion, "/")
	if tm.Kind != "CredentialProviderConfig" {
		return nil, fmt.Errorf("failed to decode %q (wrong Kind)", tm.Kind)
	}
	if group != configGroup {
		return nil, fmt.Errorf("failed to decode CredentialProviderConfig, unexpected Group: %s", group)
	}
	var older any
	switch tm.APIVersion {
	case configv1.SchemeGroupVersion.String():
		out := &configv1.CredentialProviderConfig{}
		if err := yaml.UnmarshalStrict(data, out); err != nil {
			return nil, err
		}
		return out, nil
	case configv1beta1.SchemeGroupVersion.String():
		older = &configv1beta1.CredentialProviderConfig{}
	case configv1alpha1.SchemeGroupVersion.String():
		older = &configv1alpha1.CredentialProviderConfig{}
	default:
		return nil, fmt.Errorf("no kind \"CredentialProviderConfig\" is registered for version %q", tm.APIVersion)
	}
	// The older versions' fields are v1's, without tokenAttributes.
	if err := yaml.UnmarshalStrict(data, older); err != nil {
		return nil, err
	}
	b, err := json.Marshal(older)
	if err != nil {
		return nil, err
	}
	out := &configv1.CredentialProviderConfig{}
	return out, json.Unmarshal(b, out)
}

// Service account token cache types (tokenAttributes.cacheType).
const (
	cacheTypeServiceAccount = "ServiceAccount"
	cacheTypeToken          = "Token"
)

// ValidateConfig is the kubelet's validateCredentialProviderConfig; saTokens
// is the KubeletServiceAccountTokenForCredentialProviders feature gate.
func ValidateConfig(cfg *configv1.CredentialProviderConfig, saTokens bool) field.ErrorList {
	var errs field.ErrorList
	if len(cfg.Providers) == 0 {
		errs = append(errs, field.Required(field.NewPath("providers"), "at least 1 item in plugins is required"))
	}
	fp := field.NewPath("providers")
	seen := sets.New[string]()
	validCacheTypes := sets.New(cacheTypeServiceAccount, cacheTypeToken)
	for _, p := range cfg.Providers {
		if strings.Contains(p.Name, "/") {
			errs = append(errs, field.Invalid(fp.Child("name"), p.Name, "provider name cannot contain '/'"))
		}
		if strings.Contains(p.Name, " ") {
			errs = append(errs, field.Invalid(fp.Child("name"), p.Name, "provider name cannot contain spaces"))
		}
		if p.Name == "." {
			errs = append(errs, field.Invalid(fp.Child("name"), p.Name, "provider name cannot be '.'"))
		}
		if p.Name == ".." {
			errs = append(errs, field.Invalid(fp.Child("name"), p.Name, "provider name cannot be '..'"))
		}
		if seen.Has(p.Name) {
			errs = append(errs, field.Duplicate(fp.Child("name"), p.Name))
		}
		seen.Insert(p.Name)
		if p.APIVersion == "" {
			errs = append(errs, field.Required(fp.Child("apiVersion"), ""))
		} else if !apiVersions.Has(p.APIVersion) {
			errs = append(errs, field.NotSupported(fp.Child("apiVersion"), p.APIVersion, sets.List(apiVersions)))
		}
		if len(p.MatchImages) == 0 {
			errs = append(errs, field.Required(fp.Child("matchImages"), "at least 1 item in matchImages is required"))
		}
		for _, m := range p.MatchImages {
			if _, err := ParseSchemelessURL(m); err != nil {
				errs = append(errs, field.Invalid(fp.Child("matchImages"), m, fmt.Sprintf("match image is invalid: %s", err.Error())))
			}
		}
		if p.DefaultCacheDuration == nil {
			errs = append(errs, field.Required(fp.Child("defaultCacheDuration"), ""))
		}
		if p.DefaultCacheDuration != nil && p.DefaultCacheDuration.Duration < 0 {
			errs = append(errs, field.Invalid(fp.Child("defaultCacheDuration"), p.DefaultCacheDuration, "must be greater than or equal to 0"))
		}
		ta := p.TokenAttributes
		if ta == nil {
			continue
		}
		tp := fp.Child("tokenAttributes")
		if !saTokens {
			errs = append(errs, field.Forbidden(tp, "tokenAttributes is not supported when KubeletServiceAccountTokenForCredentialProviders feature gate is disabled"))
		}
		if ta.ServiceAccountTokenAudience == "" {
			errs = append(errs, field.Required(tp.Child("serviceAccountTokenAudience"), ""))
		}
		if ta.RequireServiceAccount == nil {
			errs = append(errs, field.Required(tp.Child("requireServiceAccount"), ""))
		}
		if p.APIVersion != credentialproviderv1.SchemeGroupVersion.String() {
			errs = append(errs, field.Forbidden(tp, fmt.Sprintf("tokenAttributes is only supported for %s API version", credentialproviderv1.SchemeGroupVersion.String())))
		}
		if ta.RequireServiceAccount != nil && !*ta.RequireServiceAccount && len(ta.RequiredServiceAccountAnnotationKeys) > 0 {
			errs = append(errs, field.Forbidden(tp.Child("requiredServiceAccountAnnotationKeys"), "requireServiceAccount cannot be false when requiredServiceAccountAnnotationKeys is set"))
		}
		errs = append(errs, validateAnnotationKeys(tp.Child("requiredServiceAccountAnnotationKeys"), ta.RequiredServiceAccountAnnotationKeys)...)
		errs = append(errs, validateAnnotationKeys(tp.Child("optionalServiceAccountAnnotationKeys"), ta.OptionalServiceAccountAnnotationKeys)...)
		if dup := sets.New(ta.RequiredServiceAccountAnnotationKeys...).Intersection(sets.New(ta.OptionalServiceAccountAnnotationKeys...)); dup.Len() > 0 {
			errs = append(errs, field.Invalid(tp, sets.List(dup), "annotation keys cannot be both required and optional"))
		}
		switch {
		case ta.CacheType == "":
			errs = append(errs, field.Required(tp.Child("cacheType"), fmt.Sprintf("cacheType is required to be set when tokenAttributes is specified. Supported values are: %s", strings.Join(sets.List(validCacheTypes), ", "))))
		case validCacheTypes.Has(string(ta.CacheType)):
		default:
			errs = append(errs, field.NotSupported(tp.Child("cacheType"), ta.CacheType, sets.List(validCacheTypes)))
		}
	}
	return errs
}

func validateAnnotationKeys(fp *field.Path, keys []string) field.ErrorList {
	var errs field.ErrorList
	seen := sets.New[string]()
	for _, k := range keys {
		for _, msg := range validation.IsQualifiedName(strings.ToLower(k)) {
			errs = append(errs, field.Invalid(fp, k, msg))
		}
		if seen.Has(k) {
			errs = append(errs, field.Duplicate(fp, k))
		}
		seen.Insert(k)
	}
	return errs
}
