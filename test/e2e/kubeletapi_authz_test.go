package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// kubeletIdentity creates a ServiceAccount whose only permission on nodes is
// the given verbs of one subresource, waits until the apiserver authorizes
// it (RBAC is cached) and returns its user name and a token.
func kubeletIdentity(t *testing.T, ns, sub string, verbs ...string) (string, string) {
	t.Helper()
	ctx, c := ctxT(t), cluster.Client()
	name := "only-" + sub
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := ns + "-" + name
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/" + sub}, Verbs: verbs}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.RbacV1().ClusterRoleBindings().Delete(context.Background(), role, metav1.DeleteOptions{})
		_ = c.RbacV1().ClusterRoles().Delete(context.Background(), role, metav1.DeleteOptions{})
	})
	user := "system:serviceaccount:" + ns + ":" + name
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verbs[0], Resource: "nodes", Subresource: sub, Name: nodeName, Version: "v1"},
		}}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, nil
	})
	if err != nil {
		t.Fatalf("RBAC never allowed %s nodes/%s", user, sub)
	}
	tok, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return user, tok.Status.Token
}

// kubeletCall sends one request straight to the node's kubelet API port on
// loopback, with token as bearer (none if empty).
func kubeletCall(t *testing.T, method, path, token string) (int, string) {
	t.Helper()
	return kubeletCallLimit(t, method, path, token, 64<<10)
}

// kubeletCallLimit is kubeletCall reading up to limit bytes of the answer.
func kubeletCallLimit(t *testing.T, method, path, token string, limit int64) (int, string) {
	t.Helper()
	return kubeletCallAt(t, node.Port(), method, path, token, limit)
}

// kubeletCallAt is kubeletCallLimit to the kubelet API on another port (an
// extra node's).
func kubeletCallAt(t *testing.T, port int, method, path, token string, limit int64) (int, string) {
	t.Helper()
	ca, err := os.ReadFile(cluster.CACertFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	req, err := http.NewRequestWithContext(ctxT(t), method, fmt.Sprintf("https://127.0.0.1:%d%s", port, path), nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, limit))
	return resp.StatusCode, string(b)
}

// The kubelet API authorizes each path as the kubelet does: an identity
// holding one nodes/ subresource reaches exactly the paths it maps to, and
// gets the kubelet's 403 text everywhere else. /pods and /healthz accept
// their fine-grained subresource or nodes/proxy (KubeletFineGrainedAuthz).
func TestKubeletAPIAuthorization(t *testing.T) {
	skipIfNoCluster(t)
	ns := cluster.NewNamespace(t)
	pod := busybox(ns, "talker", "sh", "-c", "echo from-talker; exec sleep 3600")
	pod.Spec.NodeName = nodeName
	pod.Spec.TerminationGracePeriodSeconds = ptrTo(int64(1))
	cluster.CreatePod(t, pod)
	waitPhase(t, ns, "talker", v1.PodRunning)
	// Running is the container's start; its first line reaches the log
	// file a moment later (as with the kubelet, the output is copied
	// asynchronously), which the logs check below reads.
	waitLogLine(t, ns, "talker", "from-talker")
	logs := "/containerLogs/" + ns + "/talker/c"

	type call struct {
		method, path string
		code         int
		subs         string // the 403's subresource(s)
	}
	forbidden := func(method, path, subs string) call { return call{method, path, 403, subs} }
	for _, tc := range []struct {
		sub   string
		verbs []string
		calls []call
	}{
		{"proxy", []string{"get", "create"}, []call{
			{"GET", "/pods", 200, ""},
			{"GET", "/healthz", 200, ""},
			{"GET", logs, 200, ""},
			forbidden("GET", "/logs/", "[log]"),
			forbidden("GET", "/stats/summary", "[stats]"),
			forbidden("GET", "/metrics", "[metrics]"),
		}},
		{"log", []string{"get"}, []call{
			{"GET", "/logs/", 200, ""}, // the node's /var/log, listed
			forbidden("GET", "/pods", "[pods proxy]"),
			forbidden("GET", "/healthz", "[healthz proxy]"),
			forbidden("GET", logs, "[proxy]"),
			forbidden("POST", "/exec/"+ns+"/talker/c?command=true&output=1", "[proxy]"),
		}},
		{"pods", []string{"get"}, []call{
			{"GET", "/pods", 200, ""},
			forbidden("GET", "/healthz", "[healthz proxy]"),
			forbidden("GET", logs, "[proxy]"),
		}},
		{"healthz", []string{"get"}, []call{
			{"GET", "/healthz", 200, ""},
			forbidden("GET", "/pods", "[pods proxy]"),
		}},
		{"stats", []string{"get"}, []call{
			{"GET", "/stats/summary", 200, ""},
			forbidden("GET", "/metrics/resource", "[metrics]"),
			forbidden("GET", "/metrics/cadvisor", "[metrics]"),
			forbidden("GET", "/pods", "[pods proxy]"),
		}},
		{"metrics", []string{"get"}, []call{
			{"GET", "/metrics", 200, ""},
			{"GET", "/metrics/resource", 200, ""},
			{"GET", "/metrics/cadvisor", 200, ""},
			forbidden("GET", "/stats/summary", "[stats]"),
			forbidden("GET", "/healthz", "[healthz proxy]"),
		}},
	} {
		user, token := kubeletIdentity(t, ns, tc.sub, tc.verbs...)
		for _, c := range tc.calls {
			code, body := kubeletCall(t, c.method, c.path, token)
			if code != c.code {
				t.Errorf("nodes/%s %s %s: %d %q, want %d", tc.sub, c.method, c.path, code, body, c.code)
				continue
			}
			if c.code == 403 {
				verb := map[string]string{"GET": "get", "POST": "create"}[c.method]
				want := fmt.Sprintf("Forbidden (user=%s, verb=%s, resource=nodes, subresource(s)=%s)\n", user, verb, c.subs)
				if body != want {
					t.Errorf("nodes/%s %s %s: body %q, want %q", tc.sub, c.method, c.path, body, want)
				}
			}
			if c.path == logs && code == 200 && !strings.Contains(body, "from-talker") {
				t.Errorf("nodes/proxy logs: %q", body)
			}
		}
	}
	if code, body := kubeletCall(t, "GET", "/pods", ""); code != 401 || body != "Unauthorized" {
		t.Errorf("no credentials: %d %q, want 401 Unauthorized", code, body)
	}
}
