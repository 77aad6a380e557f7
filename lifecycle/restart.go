package lifecycle

import (
	"slices"

	v1 "k8s.io/api/core/v1"
)

// IsSidecar reports an init container with restartPolicy Always.
func IsSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// ShouldRestart decides whether a container that exited with exitCode is
// started again: its restartPolicyRules first, then its own restartPolicy,
// then the pod's (ContainerRestartRules, on by default in 1.35).
func ShouldRestart(c *v1.Container, spec *v1.PodSpec, exitCode int32) bool {
	if c.RestartPolicy != nil {
		for _, rule := range c.RestartPolicyRules {
			if rule.ExitCodes != nil && exitCodeMatches(rule.ExitCodes, exitCode) {
				if rule.Action == v1.ContainerRestartRuleActionRestart {
					return true
				}
				break
			}
		}
		switch *c.RestartPolicy {
		case v1.ContainerRestartPolicyAlways:
			return true
		case v1.ContainerRestartPolicyOnFailure:
			return exitCode != 0
		case v1.ContainerRestartPolicyNever:
			return false
		}
	}
	switch spec.RestartPolicy {
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	case v1.RestartPolicyNever:
		return false
	default:
		return true
	}
}

func exitCodeMatches(r *v1.ContainerRestartRuleOnExitCodes, code int32) bool {
	in := slices.Contains(r.Values, code)
	if r.Operator == v1.ContainerRestartRuleOnExitCodesOpNotIn {
		return !in
	}
	return in
}
