// Package pullrecords is the kubelet's image pull manager
// (pkg/kubelet/images/pullmanager, KubeletEnsureSecretPulledImages): which
// credentials pulled each image, kept on disk under
// <root-dir>/image_manager as the kubelet's records (pull intents in
// pulling/, ImagePulledRecords in pulled/, each file named by the SHA-256
// of its image or image ref), and whether a pod must prove it holds them
// before it may use an image already present.
package pullrecords

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/distribution/reference"
	"github.com/google/renameio/v2"
	log "github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"
)

// The kubelet's credential types, as its records hold them.
type (
	Credentials    = kubeletv1beta1.ImagePullCredentials
	Secret         = kubeletv1beta1.ImagePullSecret
	ServiceAccount = kubeletv1beta1.ImagePullServiceAccount
)

// PodCredentials returns a pod's own credentials for the image (its pull
// secrets, the service account a plugin was given a token of); asked only
// when the record does not settle it.
type PodCredentials func() ([]Secret, *ServiceAccount)

// writeWhileMatchingLimit is the kubelet's: a record that already names this
// many secrets is not grown while checking.
const writeWhileMatchingLimit = 100

// Manager keeps the records. One lock serves the node: pulls and checks
// are few, and the kubelet's striped locks only spread the same work.
type Manager struct {
	pullingDir, pulledDir string
	policy                Policy
	clock                 clock.Clock

	mu      sync.Mutex
	intents map[string]int // image -> pulls in flight
}

// New opens (making them) the record directories under rootDir.
func New(rootDir string, policy Policy, clk clock.Clock) (*Manager, error) {
	m := &Manager{
		pullingDir: filepath.Join(rootDir, "image_manager", "pulling"),
		pulledDir:  filepath.Join(rootDir, "image_manager", "pulled"),
		policy:     policy,
		clock:      clk,
		intents:    map[string]int{},
	}
	for _, d := range []string{m.pullingDir, m.pulledDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Recover turns the intents a restart interrupted into records, as the
// kubelet's initialize: an image whose pull finished before the restart
// (present, by refOf) gets a record without credentials, so that every pod
// must prove its own; an image still absent keeps its intent, which marks
// it as the kubelet's rather than preloaded should it appear.
func (m *Manager) Recover(refOf func(image string) (string, bool)) {
	intents, err := m.listIntents()
	if err != nil {
		log.WithError(err).Error("Listing image pull intents; continuing with those read")
	}
	for _, image := range intents {
		ref, ok := refOf(image)
		if !ok {
			continue
		}
		m.mu.Lock()
		err := m.writeIfChanged(image, ref, nil)
		m.mu.Unlock()
		if err != nil {
			log.WithError(err).WithField("imageRef", ref).Error("Failed to write an image pulled record")
			continue
		}
		if err := removeIfExists(filepath.Join(m.pullingDir, fileName(image))); err != nil {
			log.WithError(err).WithField("image", image).Warn("Failed to remove an image pull intent")
		}
	}
}

// RecordIntent marks image as being pulled by the kubelet before the pull
// starts: an image a restart interrupts is not mistaken for a preloaded one.
func (m *Manager) RecordIntent(image string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, err := encode(&kubeletv1beta1.ImagePullIntent{TypeMeta: typeMeta("ImagePullIntent"), Image: image})
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(filepath.Join(m.pullingDir, fileName(image)), b, 0o600); err != nil {
		return fmt.Errorf("failed to record image pull intent: %w", err)
	}
	m.intents[image]++
	return nil
}

// RecordPulled records the credentials creds (nil: none were needed, or
// the node's) that pulled image as imageRef, and ends its intent.
func (m *Manager) RecordPulled(image, imageRef string, creds *Credentials) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.writeIfChanged(image, imageRef, creds); err != nil {
		log.WithError(err).WithField("imageRef", imageRef).Error("Failed to write image pulled record")
		return
	}
	m.endIntent(image)
}

// RecordFailed ends the intent of a pull that failed.
func (m *Manager) RecordFailed(image string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.endIntent(image)
}

// endIntent removes the intent once the last pull of image in flight ends.
func (m *Manager) endIntent(image string) {
	if m.intents[image] > 1 {
		m.intents[image]--
		return
	}
	if err := removeIfExists(filepath.Join(m.pullingDir, fileName(image))); err != nil {
		log.WithError(err).WithField("image", image).Error("Failed to remove image pull intent")
		return
	}
	delete(m.intents, image)
}

// MustAttemptPull is the kubelet's MustAttemptImagePull: whether a pod
// asking for image, present as imageRef, must pull it (with its own
// credentials) rather than use it. A record that cannot be read means a
// pull, never a pass.
func (m *Manager) MustAttemptPull(image, imageRef string, pod PodCredentials) bool {
	if imageRef == "" {
		return true
	}
	m.mu.Lock()
	rec, err := m.read(imageRef)
	pulledByKubelet := rec != nil
	if err == nil && !pulledByKubelet {
		pulledByKubelet = m.intents[image] > 0
		if !pulledByKubelet {
			_, statErr := os.Stat(filepath.Join(m.pullingDir, fileName(image)))
			pulledByKubelet = statErr == nil
		}
	}
	m.mu.Unlock()
	if err != nil {
		log.WithError(err).Error("Unable to access cache records about image pulls")
		return true
	}
	if !m.policy(image, pulledByKubelet) {
		return false
	}
	if rec == nil {
		return true
	}
	name, err := repository(image)
	if err != nil {
		return true
	}
	cached, ok := rec.CredentialMapping[name]
	if !ok {
		return true
	}
	if cached.NodePodsAccessible {
		return false
	}
	if len(cached.KubernetesSecrets) == 0 && len(cached.KubernetesServiceAccounts) == 0 {
		return true
	}
	secrets, sa := pod()
	for _, ps := range secrets {
		for _, cs := range cached.KubernetesSecrets {
			hashes := cs.CredentialHash != "" && ps.CredentialHash == cs.CredentialHash
			coords := ps.UID == cs.UID && ps.Namespace == cs.Namespace && ps.Name == cs.Name
			if !hashes && !coords {
				continue
			}
			// The same credentials in another secret, or the same secret
			// with new content (a rotated password): the kubelet trusts it
			// and records it, so that the next check matches it directly.
			if (!hashes || !coords) && len(cached.KubernetesSecrets) < writeWhileMatchingLimit {
				m.mu.Lock()
				if err := m.writeIfChanged(image, imageRef, &Credentials{KubernetesSecrets: []Secret{ps}}); err != nil {
					log.WithError(err).WithField("imageRef", imageRef).Error("Failed to write an image pulled record")
				}
				m.mu.Unlock()
			}
			return false
		}
	}
	return sa == nil || !slices.Contains(cached.KubernetesServiceAccounts, *sa)
}

// Prune removes the records of images gone (not in present) and not
// updated since until, as the kubelet's image garbage collector does.
func (m *Manager) Prune(present []string, until time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	entries, err := os.ReadDir(m.pulledDir)
	if err != nil {
		log.WithError(err).Error("Listing image pulled records")
		return
	}
	keep := map[string]bool{}
	for _, ref := range present {
		keep[fileName(ref)] = true
	}
	for _, e := range entries {
		if !validFile(e) || keep[e.Name()] {
			continue
		}
		p := filepath.Join(m.pulledDir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var rec kubeletv1beta1.ImagePulledRecord
		if json.Unmarshal(b, &rec) == nil && !rec.LastUpdatedTime.Time.Before(until) {
			continue
		}
		if err := removeIfExists(p); err != nil {
			log.WithError(err).Error("Failed to remove an image pulled record")
		}
	}
}

// writeIfChanged merges creds into imageRef's record for image's
// repository, writing it only when it changed. m.mu is held.
func (m *Manager) writeIfChanged(image, imageRef string, creds *Credentials) error {
	name, err := repository(image)
	if err != nil {
		return fmt.Errorf("invalid image name %q: %w", image, err)
	}
	rec, err := m.read(imageRef)
	if err != nil {
		log.WithError(err).WithField("image", image).Info("Failed to retrieve an ImagePulledRecord")
		rec = nil
	}
	if rec == nil {
		rec = &kubeletv1beta1.ImagePulledRecord{ImageRef: imageRef, CredentialMapping: map[string]Credentials{}}
		if creds != nil {
			rec.CredentialMapping[name] = *creds
		}
	} else if !merge(rec, name, creds) {
		return nil
	}
	rec.TypeMeta = typeMeta("ImagePulledRecord")
	rec.LastUpdatedTime = metav1.NewTime(m.clock.Now())
	b, err := encode(rec)
	if err != nil {
		return err
	}
	return renameio.WriteFile(filepath.Join(m.pulledDir, fileName(imageRef)), b, 0o600)
}

// merge is the kubelet's pulledRecordMergeNewCreds, in place: the node's
// credentials (or none) make the image every pod's; secrets and service
// accounts add up. It says whether rec changed.
func merge(rec *kubeletv1beta1.ImagePulledRecord, name string, creds *Credentials) bool {
	if creds == nil || !creds.NodePodsAccessible && len(creds.KubernetesSecrets) == 0 && len(creds.KubernetesServiceAccounts) == 0 {
		return false
	}
	if rec.CredentialMapping == nil {
		rec.CredentialMapping = map[string]Credentials{}
	}
	cur, ok := rec.CredentialMapping[name]
	if !ok {
		rec.CredentialMapping[name] = *creds
		return true
	}
	if cur.NodePodsAccessible {
		return false
	}
	changed := false
	switch {
	case creds.NodePodsAccessible:
		cur = Credentials{NodePodsAccessible: true}
		changed = true
	case len(creds.KubernetesSecrets) > 0:
		for _, s := range creds.KubernetesSecrets {
			i := slices.IndexFunc(cur.KubernetesSecrets, func(c Secret) bool {
				return c.UID == s.UID && c.Namespace == s.Namespace && c.Name == s.Name
			})
			switch {
			case i < 0:
				cur.KubernetesSecrets = append(cur.KubernetesSecrets, s)
				changed = true
			case cur.KubernetesSecrets[i].CredentialHash != s.CredentialHash:
				cur.KubernetesSecrets[i].CredentialHash = s.CredentialHash
				changed = true
			}
		}
		slices.SortFunc(cur.KubernetesSecrets, func(a, b Secret) int {
			return strings.Compare(a.Namespace+"\x00"+a.Name+"\x00"+a.UID, b.Namespace+"\x00"+b.Name+"\x00"+b.UID)
		})
	case len(creds.KubernetesServiceAccounts) > 0:
		for _, sa := range creds.KubernetesServiceAccounts {
			if !slices.Contains(cur.KubernetesServiceAccounts, sa) {
				cur.KubernetesServiceAccounts = append(cur.KubernetesServiceAccounts, sa)
				changed = true
			}
		}
		slices.SortFunc(cur.KubernetesServiceAccounts, func(a, b ServiceAccount) int {
			return strings.Compare(a.Namespace+"\x00"+a.Name+"\x00"+a.UID, b.Namespace+"\x00"+b.Name+"\x00"+b.UID)
		})
	}
	if changed {
		rec.CredentialMapping[name] = cur
	}
	return changed
}

// read is imageRef's record, nil when there is none (or it is another's:
// the kubelet checks the name inside against a hash collision).
func (m *Manager) read(imageRef string) (*kubeletv1beta1.ImagePulledRecord, error) {
	b, err := os.ReadFile(filepath.Join(m.pulledDir, fileName(imageRef)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec kubeletv1beta1.ImagePulledRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("failed to decode ImagePulledRecord of %q: %w", imageRef, err)
	}
	if rec.ImageRef != imageRef {
		return nil, nil
	}
	return &rec, nil
}

func (m *Manager) listIntents() ([]string, error) {
	entries, err := os.ReadDir(m.pullingDir)
	if err != nil {
		return nil, err
	}
	var out []string
	var errs []error
	for _, e := range entries {
		if !validFile(e) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(m.pullingDir, e.Name()))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var in kubeletv1beta1.ImagePullIntent
		if err := json.Unmarshal(b, &in); err != nil || in.Image == "" {
			errs = append(errs, fmt.Errorf("failed to decode ImagePullIntent from file %q: %v", e.Name(), err))
			continue
		}
		out = append(out, in.Image)
	}
	return out, errors.Join(errs...)
}

// repository is the kubelet's trimImageTagDigest: the image's normalized
// repository, the key of a record's credential mapping.
func repository(image string) (string, error) {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", err
	}
	return named.Name(), nil
}

// fileName is the kubelet's cacheFilename.
func fileName(key string) string { return fmt.Sprintf("sha256-%x", sha256.Sum256([]byte(key))) }

// validFile skips directories and renameio's temporary files.
func validFile(e os.DirEntry) bool {
	return !e.IsDir() && strings.HasPrefix(e.Name(), "sha256-") && len(e.Name()) == len("sha256-")+64
}

func typeMeta(kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: kubeletv1beta1.SchemeGroupVersion.String(), Kind: kind}
}

func encode(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func removeIfExists(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
