package pullrecords

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
)

const (
	image = "reg.example.com/team/app:1.0"
	ref   = "reg.example.com/team/app@sha256:0123"
)

var (
	secretA  = Secret{UID: "uid-a", Namespace: "a", Name: "pull", CredentialHash: "hash-a"}
	secretB  = Secret{UID: "uid-b", Namespace: "b", Name: "pull", CredentialHash: "hash-b"}
	saA      = ServiceAccount{UID: "sa-uid", Namespace: "a", Name: "puller"}
	noCreds  = func() ([]Secret, *ServiceAccount) { return nil, nil }
	withA    = func() ([]Secret, *ServiceAccount) { return []Secret{secretA}, nil }
	withB    = func() ([]Secret, *ServiceAccount) { return []Secret{secretB}, nil }
	withSA   = func() ([]Secret, *ServiceAccount) { return nil, &saA }
	mustNeed = func(t *testing.T) PodCredentials {
		return func() ([]Secret, *ServiceAccount) { t.Error("pod credentials asked"); return nil, nil }
	}
)

func newManager(t *testing.T, dir string, p kubeletv1beta1.ImagePullCredentialsVerificationPolicy, allow ...string) *Manager {
	t.Helper()
	pol, err := NewPolicy(p, allow)
	if err != nil {
		t.Fatal(err)
	}
	m, err := New(dir, pol, clocktesting.NewFakeClock(time.Unix(1e9, 0)))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// The decision, policy by record by the pod's credentials, as the kubelet's
// MustAttemptImagePull.
func TestMustAttemptPull(t *testing.T) {
	secrets := &Credentials{KubernetesSecrets: []Secret{secretA}}
	for _, tc := range []struct {
		name   string
		policy kubeletv1beta1.ImagePullCredentialsVerificationPolicy
		allow  []string
		record *Credentials // nil: preloaded (no record, no intent)
		intent bool         // a pull in flight or interrupted
		pod    PodCredentials
		want   bool
	}{
		{name: "preloaded, default policy", policy: kubeletv1beta1.NeverVerifyPreloadedImages, pod: noCreds, want: false},
		{name: "preloaded, AlwaysVerify", policy: kubeletv1beta1.AlwaysVerify, pod: noCreds, want: true},
		{name: "preloaded, NeverVerify", policy: kubeletv1beta1.NeverVerify, pod: noCreds, want: false},
		{name: "preloaded, allowlisted", policy: kubeletv1beta1.NeverVerifyAllowlistedImages, allow: []string{"reg.example.com/team/*"}, pod: noCreds, want: false},
		{name: "preloaded, allowlisted repository", policy: kubeletv1beta1.NeverVerifyAllowlistedImages, allow: []string{"reg.example.com/team/app"}, pod: noCreds, want: false},
		{name: "preloaded, not allowlisted", policy: kubeletv1beta1.NeverVerifyAllowlistedImages, allow: []string{"reg.example.com/other/*"}, pod: noCreds, want: true},
		{name: "intent only: the kubelet's, no record", policy: kubeletv1beta1.NeverVerifyPreloadedImages, intent: true, pod: noCreds, want: true},
		{name: "secret's, pod without", policy: kubeletv1beta1.NeverVerifyPreloadedImages, record: secrets, pod: noCreds, want: true},
		{name: "secret's, pod with another", policy: kubeletv1beta1.NeverVerifyPreloadedImages, record: secrets, pod: withB, want: true},
		{name: "secret's, pod with it", policy: kubeletv1beta1.NeverVerifyPreloadedImages, record: secrets, pod: withA, want: false},
		{name: "secret's, NeverVerify", policy: kubeletv1beta1.NeverVerify, record: secrets, pod: noCreds, want: false},
		{name: "node's", policy: kubeletv1beta1.AlwaysVerify, record: &Credentials{NodePodsAccessible: true}, pod: mustNeed(t), want: false},
		{name: "empty record", policy: kubeletv1beta1.NeverVerifyPreloadedImages, record: &Credentials{}, pod: withA, want: true},
		{name: "service account's, same", policy: kubeletv1beta1.NeverVerifyPreloadedImages, record: &Credentials{KubernetesServiceAccounts: []ServiceAccount{saA}}, pod: withSA, want: false},
		{name: "service account's, other pod", policy: kubeletv1beta1.NeverVerifyPreloadedImages, record: &Credentials{KubernetesServiceAccounts: []ServiceAccount{saA}}, pod: withB, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newManager(t, t.TempDir(), tc.policy, tc.allow...)
			if tc.intent {
				if err := m.RecordIntent(image); err != nil {
					t.Fatal(err)
				}
			}
			if tc.record != nil {
				m.RecordIntent(image)
				m.RecordPulled(image, ref, tc.record)
			}
			if got := m.MustAttemptPull(image, ref, tc.pod); got != tc.want {
				t.Errorf("MustAttemptPull = %v, want %v", got, tc.want)
			}
		})
	}
}

// The same credentials in another secret, or the same secret rotated, pass
// and are recorded, as the kubelet's.
func TestMatchRecordsSecret(t *testing.T) {
	m := newManager(t, t.TempDir(), kubeletv1beta1.NeverVerifyPreloadedImages)
	m.RecordIntent(image)
	m.RecordPulled(image, ref, &Credentials{KubernetesSecrets: []Secret{secretA}})
	sameContent := Secret{UID: "uid-c", Namespace: "c", Name: "copy", CredentialHash: "hash-a"}
	if m.MustAttemptPull(image, ref, func() ([]Secret, *ServiceAccount) { return []Secret{sameContent}, nil }) {
		t.Fatal("the same credentials in another secret refused")
	}
	rec, err := m.read(ref)
	if err != nil || len(rec.CredentialMapping["reg.example.com/team/app"].KubernetesSecrets) != 2 {
		t.Fatalf("record %+v, %v: want both secrets", rec, err)
	}
	// Another tag of the repository is the same mapping; another
	// repository of the same content is not.
	if m.MustAttemptPull("reg.example.com/team/app:2.0", ref, withA) {
		t.Error("another tag refused")
	}
	if !m.MustAttemptPull("reg.example.com/team/mirror:1.0", ref, withA) {
		t.Error("another repository's record used")
	}
}

// Records are files: a new manager (hostlet restarted) reads them, and an
// intent a restart interrupted becomes a record without credentials once
// the image is found present.
func TestPersistence(t *testing.T) {
	dir := t.TempDir()
	m := newManager(t, dir, kubeletv1beta1.NeverVerifyPreloadedImages)
	m.RecordIntent(image)
	m.RecordPulled(image, ref, &Credentials{KubernetesSecrets: []Secret{secretA}})
	m.RecordIntent("reg.example.com/team/other:1") // the pull never ended
	m.RecordIntent("reg.example.com/team/gone:1")

	b, err := os.ReadFile(filepath.Join(dir, "image_manager", "pulled", fileName(ref)))
	if err != nil {
		t.Fatal(err)
	}
	var rec kubeletv1beta1.ImagePulledRecord
	if err := json.Unmarshal(b, &rec); err != nil || rec.Kind != "ImagePulledRecord" || rec.APIVersion != "kubelet.config.k8s.io/v1beta1" || rec.ImageRef != ref {
		t.Fatalf("record file %s: %v", b, err)
	}

	m2 := newManager(t, dir, kubeletv1beta1.NeverVerifyPreloadedImages)
	m2.Recover(func(img string) (string, bool) {
		if img == "reg.example.com/team/other:1" {
			return "other-ref", true
		}
		return "", false
	})
	if !m2.MustAttemptPull(image, ref, noCreds) || m2.MustAttemptPull(image, ref, withA) {
		t.Error("the record did not survive the restart")
	}
	if !m2.MustAttemptPull("reg.example.com/team/other:1", "other-ref", withA) {
		t.Error("an interrupted pull's image is taken as preloaded")
	}
	if _, err := os.Stat(filepath.Join(dir, "image_manager", "pulling", fileName("reg.example.com/team/other:1"))); !os.IsNotExist(err) {
		t.Errorf("the recovered intent stays: %v", err)
	}
	// Still absent: its intent stays and marks it as the kubelet's.
	if !m2.MustAttemptPull("reg.example.com/team/gone:1", "gone-ref", noCreds) {
		t.Error("an image whose pull was interrupted taken as preloaded")
	}
	// A failed pull ends its intent: the image is no longer the kubelet's.
	m2.RecordIntent("reg.example.com/team/x:1")
	m2.RecordFailed("reg.example.com/team/x:1")
	if m2.MustAttemptPull("reg.example.com/team/x:1", "x-ref", noCreds) {
		t.Error("a failed pull's intent kept")
	}

	// Pruned: gone and old.
	m2.Prune([]string{"other-ref"}, time.Unix(1e9, 0).Add(time.Hour))
	if r, _ := m2.read(ref); r != nil {
		t.Error("a record of an image gone kept")
	}
	if r, _ := m2.read("other-ref"); r == nil {
		t.Error("a record of an image present pruned")
	}
}

// Merging as the kubelet's: the node's credentials make the image every
// pod's for good; secrets and service accounts add up, a rotated secret's
// hash is replaced.
func TestMerge(t *testing.T) {
	m := newManager(t, t.TempDir(), kubeletv1beta1.AlwaysVerify)
	m.RecordPulled(image, ref, &Credentials{KubernetesSecrets: []Secret{secretA}})
	m.RecordPulled(image, ref, &Credentials{KubernetesSecrets: []Secret{secretB}})
	rotated := secretA
	rotated.CredentialHash = "hash-a2"
	m.RecordPulled(image, ref, &Credentials{KubernetesSecrets: []Secret{rotated}})
	rec, _ := m.read(ref)
	got := rec.CredentialMapping["reg.example.com/team/app"].KubernetesSecrets
	if len(got) != 2 || got[0] != rotated || got[1] != secretB {
		t.Errorf("secrets %+v", got)
	}
	m.RecordPulled(image, ref, &Credentials{NodePodsAccessible: true})
	m.RecordPulled(image, ref, &Credentials{KubernetesSecrets: []Secret{secretA}})
	rec, _ = m.read(ref)
	if c := rec.CredentialMapping["reg.example.com/team/app"]; !c.NodePodsAccessible || len(c.KubernetesSecrets) != 0 {
		t.Errorf("credentials %+v, want the node's only", c)
	}
}

func TestPolicyErrors(t *testing.T) {
	for _, allow := range [][]string{{" reg.io/*"}, {"reg.io/a*"}, {"/*"}, {"reg.io/app:1.0"}, {"*"}} {
		if _, err := NewPolicy(kubeletv1beta1.NeverVerifyAllowlistedImages, allow); err == nil {
			t.Errorf("%q accepted", allow)
		}
	}
	if _, err := NewPolicy("Sometimes", nil); err == nil {
		t.Error("unknown policy accepted")
	}
}
