package join

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strings"
)

// CAHash is the pin of a CA certificate as kubeadm prints it for
// --discovery-token-ca-cert-hash: "sha256:" and the hex SHA-256 of its
// SubjectPublicKeyInfo (the key, so a re-issued CA with the same key matches).
func CAHash(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// pins is a set of allowed CA public-key hashes (lower-case hex).
type pins map[string]bool

func parsePins(hashes []string) (pins, error) {
	p := pins{}
	for _, h := range hashes {
		format, value, ok := strings.Cut(h, ":")
		if !ok || strings.ToLower(format) != "sha256" {
			return nil, fmt.Errorf("invalid CA hash %q: want sha256:<64 hex digits>", h)
		}
		b, err := hex.DecodeString(value)
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("invalid CA hash %q: want sha256:<64 hex digits>", h)
		}
		p[strings.ToLower(value)] = true
	}
	return p, nil
}

// matchAny returns nil if one of certs has a pinned public key.
func (p pins) matchAny(certs []*x509.Certificate) error {
	var seen []string
	for _, c := range certs {
		h := CAHash(c)
		if p[strings.TrimPrefix(h, "sha256:")] {
			return nil
		}
		seen = append(seen, h)
	}
	return fmt.Errorf("the cluster CA's public key %s matches no --discovery-token-ca-cert-hash", strings.Join(seen, ", "))
}
