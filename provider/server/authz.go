package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	utilwebhook "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/apiserver/plugin/pkg/authorizer/webhook"
	"k8s.io/client-go/kubernetes"
)

// kubeletAuth is what the kubelet API needs to check a caller: the
// delegated authenticator (client certificates, TokenReview) and
// authorizer (SubjectAccessReview).
type kubeletAuth interface {
	authenticator.Request
	authorizer.Authorizer
}

type delegatedAuth struct {
	authenticator.Request
	authorizer.Authorizer
}

// AuthCache is how long the kubelet API's webhook results are cached: the
// KubeletConfiguration's authentication.webhook.cacheTTL (TokenReview) and
// authorization.webhook cacheAuthorizedTTL and cacheUnauthorizedTTL
// (SubjectAccessReview); zero ones are the kubelet's defaults.
type AuthCache struct {
	TokenTTL, AllowedTTL, DeniedTTL time.Duration
}

// AuthMode is how the kubelet API authenticates and authorizes, the
// KubeletConfiguration's authentication and authorization: the zero value is
// its defaults (anonymous requests refused, bearer tokens reviewed,
// authorization by SubjectAccessReview).
type AuthMode struct {
	// Anonymous is authentication.anonymous.enabled: a request without
	// an identity is system:anonymous's (group system:unauthenticated),
	// then authorized as any other.
	Anonymous bool
	// NoTokenReview is authentication.webhook.enabled: false: bearer
	// tokens are not reviewed (TokenReview), so they identify no one.
	NoTokenReview bool
	// AlwaysAllow is authorization.mode: AlwaysAllow: every authenticated
	// request is allowed, without SubjectAccessReview.
	AlwaysAllow bool
}

// ParseAuthorizationMode is the kubelet's BuildAuthz choice of authorizer
// for authorization.mode (--authorization-mode): AlwaysAllow or Webhook,
// anything else refused with its messages.
func ParseAuthorizationMode(mode string) (alwaysAllow bool, err error) {
	switch mode {
	case "AlwaysAllow":
		return true, nil
	case "Webhook":
		return false, nil
	case "":
		return false, errors.New("no authorization mode specified")
	}
	return false, fmt.Errorf("unknown authorization mode %s", mode)
}

// Warnings are what the mode lets through that the kubelet's defaults do
// not: the kubelet takes such a configuration, and it is insecure.
func (m AuthMode) Warnings() []string {
	var out []string
	if m.Anonymous {
		out = append(out, "kubelet API: anonymous requests are authenticated as system:anonymous (authentication.anonymous.enabled: true): insecure, anyone who reaches the port is authorized as that user")
	}
	if m.AlwaysAllow {
		msg := "kubelet API: every authenticated request is allowed without SubjectAccessReview (authorization.mode: AlwaysAllow): insecure, any client the node's client CA signed may read logs and exec in pods"
		if m.Anonymous {
			msg = "kubelet API: every request, anonymous ones too, is allowed (authorization.mode: AlwaysAllow with anonymous authentication): insecure, anyone who reaches the port may exec in any pod"
		}
		out = append(out, msg)
	}
	return out
}

// newKubeletAuth builds the kubelet's delegated auth
// (cmd/kubelet/app/auth.go's BuildAuth): client certificates from the
// client CA, reloaded when the file changes; bearer tokens through
// TokenReview unless mode.NoTokenReview, results cached 2m; anonymous
// requests as system:anonymous only with mode.Anonymous; then
// SubjectAccessReview, results cached 5m when allowed, 30s when denied
// unless cache says otherwise, or everything allowed with mode.AlwaysAllow.
// Built here, not with virtual-kubelet's nodeutil, whose import of the
// apiserver's options package links the whole generic API server.
func newKubeletAuth(ctx context.Context, client kubernetes.Interface, clientCAFile string, cache AuthCache, mode AuthMode) (kubeletAuth, error) {
	orDefault := func(d, def time.Duration) time.Duration {
		if d == 0 {
			return def
		}
		return d
	}
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca-bundle", clientCAFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	// The apiserver's DefaultAuthWebhookRetryBackoff, which the kubelet
	// uses for both webhooks (here without importing the apiserver's
	// options package).
	backoff := utilwebhook.DefaultRetryBackoffWithInitialDelay(500 * time.Millisecond)
	authnCfg := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          &apiserver.AnonymousAuthConfig{Enabled: mode.Anonymous},
		CacheTTL:                           orDefault(cache.TokenTTL, 2*time.Minute),
		ClientCertificateCAContentProvider: ca,
	}
	if !mode.NoTokenReview {
		authnCfg.TokenAccessReviewClient = client.AuthenticationV1()
		authnCfg.WebhookRetryBackoff = &backoff
	}
	authn, _, err := authnCfg.New()
	if err != nil {
		return nil, err
	}
	var authz authorizer.Authorizer
	if mode.AlwaysAllow {
		authz = authorizerfactory.NewAlwaysAllowAuthorizer()
	} else {
		// authorizerfactory.DelegatingAuthorizerConfig.New without its
		// default CEL compiler: that is only for match conditions, which a
		// delegated authorizer never has, and building it keeps ~170 KiB
		// of heap.
		authz, err = webhook.NewFromInterface(client.AuthorizationV1(), orDefault(cache.AllowedTTL, 5*time.Minute), orDefault(cache.DeniedTTL, 30*time.Second),
			backoff, authorizer.DecisionNoOpinion, authorizerfactory.NewDelegatingAuthorizerMetrics(), nil)
		if err != nil {
			return nil, err
		}
	}
	for _, w := range mode.Warnings() {
		log.Warn(w)
	}
	go ca.Run(ctx, 1)
	return delegatedAuth{authn, authz}, nil
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
