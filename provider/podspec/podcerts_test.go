package podspec

import (
	"errors"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

type fakePodCerts struct {
	key, chain []byte
	err        error
	asked      string
}

func (f *fakePodCerts) CredentialBundle(ns, name, uid, vol string, i int) ([]byte, []byte, error) {
	f.asked = ns + "/" + name + "/" + uid + "/" + vol + "/" + string(rune('0'+i))
	return f.key, f.chain, f.err
}
func (f *fakePodCerts) ForgetPod(types.UID) {}

// The kubelet's projection of a podCertificate source: bundle, key and
// chain files as asked, the volume's mode (0600 with an fsGroup); the gate
// off is its NoOpManager's error; not yet issued fails the volume.
func TestPodCertificateFiles(t *testing.T) {
	pod := &v1.Pod{}
	pod.Namespace, pod.Name, pod.UID = "ns", "p", "u"
	src := &v1.PodCertificateProjection{CredentialBundlePath: "creds.pem", KeyPath: "key.pem", CertificateChainPath: "chain.pem"}
	r := &Runtime{}
	if _, err := r.podCertificateFiles(pod, "certs", 1, src, nil); err == nil || err.Error() != "unimplemented" {
		t.Fatalf("gate off: %v", err)
	}
	f := &fakePodCerts{key: []byte("KEY\n"), chain: []byte("CHAIN\n")}
	r.cfg.PodCertificates = f
	files, err := r.podCertificateFiles(pod, "certs", 1, src, ptr.To(int32(0o644)))
	if err != nil || f.asked != "ns/p/u/certs/1" {
		t.Fatalf("%v, asked %q", err, f.asked)
	}
	if string(files["creds.pem"].Data) != "KEY\nCHAIN\n" || string(files["key.pem"].Data) != "KEY\n" || string(files["chain.pem"].Data) != "CHAIN\n" || files["key.pem"].Mode != 0o644 {
		t.Fatalf("files %+v", files)
	}
	only := &v1.PodCertificateProjection{KeyPath: "k"}
	pod.Spec.SecurityContext = &v1.PodSecurityContext{FSGroup: ptr.To(int64(5))}
	if files, _ := r.podCertificateFiles(pod, "certs", 1, only, ptr.To(int32(0o644))); len(files) != 1 || files["k"].Mode != 0o600 {
		t.Fatalf("key only, fsGroup: %+v", files)
	}
	f.err = errors.New("credential bundle is not issued yet")
	if _, err := r.podCertificateFiles(pod, "certs", 1, src, nil); err == nil {
		t.Fatal("not issued: no error")
	}
}
