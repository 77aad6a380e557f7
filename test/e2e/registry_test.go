package e2e

import (
	"encoding/base64"
	"fmt"
	"testing"

	"github.com/hostlet/hostlet/test/images"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// privateRegistry starts a loopback registry that requires auth, which the
// test cluster's containerd reaches over plain HTTP; it closes with the test.
func privateRegistry(t *testing.T, auth *images.BasicAuth) *images.Registry {
	t.Helper()
	reg, err := images.StartRegistry("127.0.0.1:0", auth)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { reg.Close() })
	if err := cluster.AllowInsecureRegistry(reg.Addr()); err != nil {
		t.Fatal(err)
	}
	return reg
}

// pullSecret creates the dockerconfigjson secret "regcred" in ns holding
// user's password for the registry at addr.
func pullSecret(t *testing.T, ns, addr, user, password string) {
	t.Helper()
	cfg := fmt.Sprintf(`{"auths":{%q:{"auth":%q}}}`, addr, base64.StdEncoding.EncodeToString([]byte(user+":"+password)))
	if _, err := cluster.Client().CoreV1().Secrets(ns).Create(ctxT(t), &v1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "regcred"}, Type: v1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{v1.DockerConfigJsonKey: []byte(cfg)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
