package pullrecords

import (
	"fmt"
	"strings"

	"github.com/distribution/reference"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// Policy says whether a pod must prove its credentials for an image that is
// present, given whether the kubelet pulled it (an image with neither a
// record nor a pull intent is preloaded): imagePullCredentialsVerificationPolicy,
// as the kubelet's ImagePullPolicyEnforcer.
type Policy func(image string, pulledByKubelet bool) bool

// NewPolicy is the kubelet's NewImagePullCredentialVerificationPolicy; the
// allowlist (preloadedImagesVerificationAllowlist) counts with
// NeverVerifyAllowlistedImages only, as the configuration's validation
// insists.
func NewPolicy(policy kubeletv1beta1.ImagePullCredentialsVerificationPolicy, allowlist []string) (Policy, error) {
	switch policy {
	case kubeletv1beta1.NeverVerify:
		return func(string, bool) bool { return false }, nil
	case kubeletv1beta1.NeverVerifyPreloadedImages, "":
		// "": the gate's default, for callers that leave it unset.
		return func(_ string, pulledByKubelet bool) bool { return pulledByKubelet }, nil
	case kubeletv1beta1.AlwaysVerify:
		return func(string, bool) bool { return true }, nil
	case kubeletv1beta1.NeverVerifyAllowlistedImages:
		exact := map[string]bool{}
		var prefixes []string
		for _, p := range allowlist {
			pat, wildcard, err := allowlistPattern(p)
			if err != nil {
				return nil, err
			}
			if wildcard {
				prefixes = append(prefixes, pat)
			} else {
				exact[pat] = true
			}
		}
		return func(image string, _ bool) bool {
			// The kubelet compares the image as the pod names it; its
			// repository without tag or digest counts too, as an
			// allowlist entry may name no tag.
			names := []string{image}
			if named, err := reference.ParseNormalizedNamed(image); err == nil {
				names = append(names, named.Name())
			}
			for _, n := range names {
				if exact[n] {
					return false
				}
				for _, p := range prefixes {
					if strings.HasPrefix(n, p) {
						return false
					}
				}
			}
			return true
		}, nil
	default:
		return nil, fmt.Errorf("unknown image pull credential verification policy: %v", policy)
	}
}

// ValidateAllowlist is the kubelet's ValidateAllowlistImagesPatterns, for
// the configuration's validation.
func ValidateAllowlist(patterns []string) error {
	for _, p := range patterns {
		if _, _, err := allowlistPattern(p); err != nil {
			return err
		}
	}
	return nil
}

// allowlistPattern is the kubelet's getAllowlistImagePattern: an image
// repository without tag or digest, or a prefix ending in "/*".
func allowlistPattern(pattern string) (string, bool, error) {
	if pattern != strings.TrimSpace(pattern) {
		return "", false, fmt.Errorf("leading/trailing spaces are not allowed: %s", pattern)
	}
	trimmed, wildcard := pattern, false
	if strings.HasSuffix(pattern, "/*") {
		wildcard = true
		trimmed = strings.TrimSuffix(trimmed, "*")
	}
	if len(trimmed) == 0 {
		return "", false, fmt.Errorf("the supplied pattern is too short: %s", pattern)
	}
	if strings.ContainsRune(trimmed, '*') {
		return "", false, fmt.Errorf("not a valid wildcard pattern, only patterns ending with '/*' are allowed: %s", pattern)
	}
	if wildcard {
		if len(trimmed) == 1 {
			return "", false, fmt.Errorf("at least registry hostname is required")
		}
		return trimmed, true, nil
	}
	named, err := reference.ParseNormalizedNamed(trimmed)
	if err != nil {
		return "", false, fmt.Errorf("failed to parse as an image name: %w", err)
	}
	if trimmed != named.Name() {
		return "", false, fmt.Errorf("neither tag nor digest is accepted in an image reference: %s", pattern)
	}
	return trimmed, false, nil
}
