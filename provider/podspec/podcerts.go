package podspec

import (
	"bytes"
	"errors"
	"github.com/hostlet/hostlet/provider/volumemanager"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodCertificates are the pod certificates the node has issued
// (podcerts.Manager): a projected podCertificate source's key (PKCS#8 PEM)
// and certificate chain, or why there is none yet.
type PodCertificates interface {
	CredentialBundle(namespace, podName, podUID, volumeName string, sourceIndex int) (key, chain []byte, err error)
	// ForgetPod drops a removed pod's keys and certificates.
	ForgetPod(uid types.UID)
}

// podCertificateFiles projects a podCertificate source as the kubelet's
// projected volume does: the key and chain in one credential bundle file,
// and/or each in its own; the volume's mode, 0600 with an fsGroup. Until
// the signer has issued, the volume (and so the pod) waits.
func (r *Runtime) podCertificateFiles(pod *v1.Pod, volume string, index int, src *v1.PodCertificateProjection, defMode *int32) (map[string]volumeFile, error) {
	if r.cfg.PodCertificates == nil {
		// The kubelet's NoOpManager: the gate off.
		return nil, errors.New("unimplemented")
	}
	key, chain, err := r.cfg.PodCertificates.CredentialBundle(pod.Namespace, pod.Name, string(pod.UID), volume, index)
	if err != nil {
		return nil, err
	}
	m := mode(defMode, nil)
	if volumemanager.FSGroup(pod) != nil {
		m = 0o600
	}
	out := map[string]volumeFile{}
	if src.CredentialBundlePath != "" {
		var b bytes.Buffer
		b.Write(key)
		b.Write(chain)
		out[src.CredentialBundlePath] = volumeFile{Data: b.Bytes(), Mode: m}
	}
	if src.KeyPath != "" {
		out[src.KeyPath] = volumeFile{Data: key, Mode: m}
	}
	if src.CertificateChainPath != "" {
		out[src.CertificateChainPath] = volumeFile{Data: chain, Mode: m}
	}
	return out, nil
}
