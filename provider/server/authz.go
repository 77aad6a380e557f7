package server

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	log "github.com/sirupsen/logrus"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// kubeletAuth is what the kubelet API needs to check a caller: the
// delegated authenticator (client certificates, TokenReview) and
// authorizer (SubjectAccessReview).
type kubeletAuth interface {
	authenticator.Request
	authorizer.Authorizer
}

// withKubeletAuth authenticates and authorizes every request as the
// kubelet's auth filter (pkg/kubelet/server) does: 401 "Unauthorized"
// without a valid identity; then the request's attributes in order, the
// first allowed one wins; otherwise 403 with the kubelet's body.
func withKubeletAuth(auth kubeletAuth, nodeName string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok, err := auth.AuthenticateRequest(r)
		if err != nil {
			log.WithError(err).Error("Unable to authenticate the request due to an error")
		}
		if err != nil || !ok {
			writeError(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		attrs := requestAttributes(info.User, r, nodeName)
		var subresources []string
		for _, a := range attrs {
			subresources = append(subresources, a.GetSubresource())
			decision, _, err := auth.Authorize(r.Context(), a)
			if err != nil {
				log.WithError(err).WithFields(log.Fields{"user": a.GetUser().GetName(), "verb": a.GetVerb(), "subresource": a.GetSubresource()}).Error("Authorization error")
				writeError(w, http.StatusInternalServerError, fmt.Sprintf("Authorization error (user=%s, verb=%s, resource=%s, subresource=%s)",
					a.GetUser().GetName(), a.GetVerb(), a.GetResource(), a.GetSubresource()))
				return
			}
			if decision == authorizer.DecisionAllow {
				next.ServeHTTP(w, r)
				return
			}
		}
		a := attrs[0]
		log.WithFields(log.Fields{"user": a.GetUser().GetName(), "verb": a.GetVerb(), "subresources": subresources}).Debug("Forbidden")
		writeError(w, http.StatusForbidden, fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=%s, subresource(s)=%v)\n",
			a.GetUser().GetName(), a.GetVerb(), a.GetResource(), subresources))
	})
}

// writeError answers as go-restful's WriteErrorString, which the kubelet uses.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg)
}

// requestAttributes are the kubelet's authorization attributes of a request
// (pkg/kubelet/server/auth.go, KubeletFineGrainedAuthz on as in 1.35): the
// verb from the HTTP method, resource nodes named after this node, and the
// subresource from the path. /pods, /runningpods, /healthz and /configz try
// their own subresource first and fall back to proxy; /stats, /metrics,
// /logs, /checkpoint, /statusz and /flagz (configz) have only theirs;
// everything else (exec, attach, portForward, containerLogs, run) is proxy.
func requestAttributes(u user.Info, r *http.Request, nodeName string) []authorizer.Attributes {
	verb := ""
	switch r.Method {
	case http.MethodPost:
		verb = "create"
	case http.MethodGet:
		verb = "get"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
	}
	path := r.URL.Path
	var subresources []string
	switch {
	case isSubpath(path, "/pods"), isSubpath(path, "/runningpods/"):
		subresources = append(subresources, "pods")
	case isSubpath(path, "/healthz"):
		subresources = append(subresources, "healthz")
	case isSubpath(path, "/configz"):
		subresources = append(subresources, "configz")
	}
	switch {
	case isSubpath(path, "/stats/"):
		subresources = append(subresources, "stats")
	case isSubpath(path, "/metrics"):
		subresources = append(subresources, "metrics")
	case isSubpath(path, "/logs/"):
		// "log", as the other log subresources (pods/log).
		subresources = append(subresources, "log")
	case isSubpath(path, "/checkpoint/"):
		subresources = append(subresources, "checkpoint")
	case isSubpath(path, "/statusz"):
		subresources = append(subresources, "statusz")
	case isSubpath(path, "/flagz"):
		subresources = append(subresources, "configz")
	default:
		subresources = append(subresources, "proxy")
	}
	attrs := make([]authorizer.Attributes, 0, len(subresources))
	for _, sub := range subresources {
		attrs = append(attrs, authorizer.AttributesRecord{
			User: u, Verb: verb, APIVersion: "v1", Resource: "nodes", Subresource: sub,
			Name: nodeName, ResourceRequest: true, Path: path,
		})
	}
	return attrs
}

// isSubpath is the kubelet's: path itself or anything below it.
func isSubpath(subpath, path string) bool {
	path = strings.TrimSuffix(path, "/")
	return subpath == path || (strings.HasPrefix(subpath, path) && subpath[len(path)] == '/')
}
