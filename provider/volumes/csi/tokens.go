package csi

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
)

// tokensKey is the volume context key (or secret key) of the pod's
// service account tokens a driver asked for (CSIDriver tokenRequests).
const tokensKey = "csi.storage.k8s.io/serviceAccount.tokens"

// tokenCache keeps the tokens made for pods' CSI volumes as the kubelet's
// token manager does: one is reused until 80% of its lifetime is gone, so
// a driver that requiresRepublish is not a token request a minute.
type tokenCache struct {
	clock clock.Clock
	mu    sync.Mutex
	byKey map[string]cachedToken
}

type cachedToken struct {
	status  authv1.TokenRequestStatus
	renewAt time.Time
}

func (c *tokenCache) get(key string) (authv1.TokenRequestStatus, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.byKey[key]
	if !ok || !c.clock.Now().Before(t.renewAt) {
		return authv1.TokenRequestStatus{}, false
	}
	return t.status, true
}

func (c *tokenCache) put(key string, st authv1.TokenRequestStatus) {
	now := c.clock.Now()
	renew := now.Add(time.Duration(float64(st.ExpirationTimestamp.Sub(now)) * 0.8))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byKey == nil {
		c.byKey = map[string]cachedToken{}
	}
	c.byKey[key] = cachedToken{status: st, renewAt: renew}
}

// forget drops a pod's tokens.
func (c *tokenCache) forget(prefix string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.byKey {
		if len(k) >= len(prefix) && k[:len(prefix)] == prefix {
			delete(c.byKey, k)
		}
	}
}

// tokenAttrs is the kubelet's podServiceAccountTokenAttrs: for each of
// the driver's tokenRequests a token of the pod's service account, bound
// to the pod, by audience, as JSON under tokensKey; inSecrets says the
// driver wants them in NodePublish's secrets rather than its context.
func (m *Manager) tokenAttrs(ctx context.Context, pod *v1.Pod, cd *storagev1.CSIDriver) (map[string]string, bool, error) {
	if cd == nil || len(cd.Spec.TokenRequests) == 0 {
		return nil, false, nil
	}
	if m.cfg.Client == nil {
		return nil, false, errors.New("no API client to request tokens with")
	}
	out := map[string]authv1.TokenRequestStatus{}
	for _, tr := range cd.Spec.TokenRequests {
		audiences := []string{tr.Audience}
		if tr.Audience == "" {
			audiences = []string{}
		}
		exp := int64(0)
		if tr.ExpirationSeconds != nil {
			exp = *tr.ExpirationSeconds
		}
		key := string(pod.UID) + "/" + pod.Spec.ServiceAccountName + "/" + tr.Audience + "/" + time.Duration(exp).String()
		if st, ok := m.tokens.get(key); ok {
			out[tr.Audience] = st
			continue
		}
		res, err := m.cfg.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, pod.Spec.ServiceAccountName, &authv1.TokenRequest{
			Spec: authv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: tr.ExpirationSeconds,
				BoundObjectRef: &authv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}},
		}, metav1.CreateOptions{})
		if err != nil {
			return nil, false, err
		}
		m.tokens.put(key, res.Status)
		out[tr.Audience] = res.Status
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, false, err
	}
	inSecrets := cd.Spec.ServiceAccountTokenInSecrets != nil && *cd.Spec.ServiceAccountTokenInSecrets
	return map[string]string{tokensKey: string(b)}, inSecrets, nil
}

// requiresRepublish: the driver wants NodePublish again periodically
// (the kubelet's pod resync), for tokens that expire, say.
func requiresRepublish(cd *storagev1.CSIDriver) bool {
	return cd != nil && cd.Spec.RequiresRepublish != nil && *cd.Spec.RequiresRepublish
}
