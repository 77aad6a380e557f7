package credentialprovider

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	log "github.com/sirupsen/logrus"
	"golang.org/x/sync/singleflight"
	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/types"
	configv1 "k8s.io/kubelet/config/v1"
	credentialproviderapi "k8s.io/kubelet/pkg/apis/credentialprovider"
	"k8s.io/kubelet/pkg/apis/credentialprovider/install"
	"k8s.io/utils/clock"
)

const (
	// globalCacheKey cannot be an image or registry name.
	globalCacheKey     = "<global>"
	cachePurgeInterval = 15 * time.Minute
	// execTimeout is the kubelet's catch-all for one plugin run: room for
	// a plugin's own retries, yet a hanging plugin never hangs a pull.
	execTimeout = time.Minute
	// waitDelay bounds the wait for the plugin's output once it was killed:
	// a child it left behind may hold stdout open.
	waitDelay = 5 * time.Second
)

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme, serializer.EnableStrict)
)

func init() { install.Install(scheme) }

// Pod is what a plugin in service account token mode learns of the pod
// whose image is pulled.
type Pod struct {
	Namespace, Name    string
	UID                types.UID
	ServiceAccountName string
}

// ServiceAccounts reads a pod's service account and requests its bound
// tokens (the node's client).
type ServiceAccounts interface {
	ServiceAccount(ctx context.Context, namespace, name string) (*v1.ServiceAccount, error)
	CreateToken(ctx context.Context, namespace, name string, req *authv1.TokenRequest) (*authv1.TokenRequest, error)
}

// Config says where the plugins are configured and found.
type Config struct {
	// ConfigPath is --image-credential-provider-config, BinDir
	// --image-credential-provider-bin-dir.
	ConfigPath, BinDir string
	// ServiceAccountTokens is the KubeletServiceAccountTokenForCredentialProviders
	// feature gate: providers with tokenAttributes get the pod's token.
	ServiceAccountTokens bool
	// ServiceAccounts serves the providers with tokenAttributes.
	ServiceAccounts ServiceAccounts
	Clock           clock.Clock
}

// Providers are the node's credential provider plugins, in the order of
// their configuration.
type Providers struct {
	plugins    []*provider
	configHash string
}

// New reads and validates the configuration and finds each provider's
// executable, failing as the kubelet's RegisterCredentialProviderPlugins
// does (the kubelet then exits).
func New(cfg Config) (*Providers, error) {
	if _, err := os.Stat(cfg.BinDir); err != nil {
		if os.IsNotExist(err) {
			return nil, fmt.Errorf("plugin binary directory %s did not exist", cfg.BinDir)
		}
		return nil, fmt.Errorf("error inspecting binary directory %s: %w", cfg.BinDir, err)
	}
	pc, hash, err := readConfig(cfg.ConfigPath)
	if err != nil {
		return nil, err
	}
	if errs := ValidateConfig(pc, cfg.ServiceAccountTokens); len(errs) > 0 {
		return nil, fmt.Errorf("failed to validate credential provider config: %v", errs.ToAggregate())
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	out := &Providers{configHash: hash}
	for _, p := range pc.Providers {
		// The kubelet's messages, with the path named (the kubelet's
		// prints LookPath's empty answer).
		bin := filepath.Join(cfg.BinDir, p.Name)
		if _, err := exec.LookPath(bin); err != nil {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
				return nil, fmt.Errorf("plugin binary executable %s did not exist", bin)
			}
			return nil, fmt.Errorf("error inspecting binary executable %s: %w", bin, err)
		}
		pr, err := newProvider(cfg, p)
		if err != nil {
			return nil, fmt.Errorf("error initializing plugin provider %s: %w", p.Name, err)
		}
		out.plugins = append(out.plugins, pr)
	}
	return out, nil
}

func newProvider(cfg Config, p configv1.CredentialProvider) (*provider, error) {
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), "application/json")
	if !ok {
		return nil, fmt.Errorf("unsupported media type %q", "application/json")
	}
	gv, err := schema.ParseGroupVersion(p.APIVersion)
	if err != nil || !apiVersions.Has(p.APIVersion) {
		return nil, fmt.Errorf("invalid apiVersion: %q", p.APIVersion)
	}
	pr := &provider{
		name: p.Name, clock: cfg.Clock, matchImages: p.MatchImages,
		defaultCacheDuration: p.DefaultCacheDuration.Duration,
		cache:                map[string]cacheEntry{}, lastPurge: cfg.Clock.Now(),
		plugin: &execPlugin{
			name: p.Name, apiVersion: p.APIVersion, encoder: codecs.EncoderForVersion(info.Serializer, gv),
			binDir: cfg.BinDir, args: p.Args, env: p.Env, timeout: execTimeout,
		},
	}
	if ta := p.TokenAttributes; cfg.ServiceAccountTokens && ta != nil && ta.ServiceAccountTokenAudience != "" {
		pr.sa = &saProvider{
			audience: ta.ServiceAccountTokenAudience, require: *ta.RequireServiceAccount,
			required: ta.RequiredServiceAccountAnnotationKeys, optional: ta.OptionalServiceAccountAnnotationKeys,
			cacheType: string(ta.CacheType), api: cfg.ServiceAccounts, clock: cfg.Clock,
		}
	}
	return pr, nil
}

// Lookup returns the plugins' credentials for image (a repository without
// tag or digest, as the kubelet's keyring is asked), the most specific
// location first. A plugin that fails is logged and gives none: the pull
// goes on without, as the kubelet's.
func (ps *Providers) Lookup(ctx context.Context, image string, pod Pod) []AuthConfig {
	if ps == nil || len(ps.plugins) == 0 {
		return nil
	}
	k := &Keyring{}
	for _, p := range ps.plugins {
		cfg, err := p.provide(ctx, image, pod)
		if err != nil {
			log.WithError(err).WithFields(log.Fields{"provider": p.name, "image": image,
				"pod": pod.Namespace + "/" + pod.Name}).Error("Failed to provide credentials for image")
			continue
		}
		k.Add(cfg)
	}
	return k.Lookup(image)
}

type cacheEntry struct {
	creds     DockerConfig
	expiresAt time.Time
}

// provider is one configured plugin with its cache of answers.
type provider struct {
	name                 string
	clock                clock.Clock
	matchImages          []string
	defaultCacheDuration time.Duration
	plugin               plugin
	sa                   *saProvider

	group     singleflight.Group
	mu        sync.Mutex
	cache     map[string]cacheEntry
	lastPurge time.Time
}

// plugin runs the provider (execPlugin; a fake in tests).
type plugin interface {
	exec(ctx context.Context, req *credentialproviderapi.CredentialProviderRequest) (*credentialproviderapi.CredentialProviderResponse, error)
}

func (p *provider) imageAllowed(image string) bool {
	for _, m := range p.matchImages {
		if ok, _ := URLsMatchStr(m, image); ok {
			return true
		}
	}
	return false
}

// provide is the kubelet's pluginProvider.provide: the cached answer for
// the image, its registry or all (within the service account's key), else
// one run of the plugin per image at a time, cached as its cacheKeyType and
// cacheDuration (or defaultCacheDuration) say.
func (p *provider) provide(ctx context.Context, image string, pod Pod) (DockerConfig, error) {
	if !p.imageAllowed(image) {
		return nil, nil
	}
	var token, saKey, tokenHash string
	var saUID types.UID
	var annotations map[string]string
	if p.sa != nil {
		if pod.ServiceAccountName == "" && p.sa.require {
			return nil, nil
		}
		if pod.ServiceAccountName != "" {
			uid, ann, err := p.sa.data(ctx, pod.Namespace, pod.ServiceAccountName)
			if err != nil {
				var missing requiredAnnotationNotFound
				if errors.As(err, &missing) {
					// A required annotation is how a workload opts in.
					log.WithError(err).WithField("provider", p.name).Debug("not invoking the credential provider")
					return nil, nil
				}
				return nil, fmt.Errorf("failed to get service account: %w", err)
			}
			annotations, saUID = ann, uid
			if token, err = p.sa.token(ctx, pod, uid); err != nil {
				return nil, fmt.Errorf("failed to get service account token: %w", err)
			}
			tokenHash = fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(token)))
			saKey = joinKey(pod.Namespace, pod.ServiceAccountName, string(uid), annotationsKey(ann))
			if p.sa.cacheType == cacheTypeToken {
				saKey = joinKey(saKey, "token", tokenHash)
			}
		}
	}
	if cfg, ok := p.cached(image, saKey); ok {
		return cfg, nil
	}
	flightKey := image
	if p.sa != nil && pod.ServiceAccountName != "" {
		flightKey = joinKey(image, tokenHash, annotationsKey(annotations))
	}
	res, err, _ := p.group.Do(flightKey, func() (any, error) {
		// Not the pull's context: one run serves every caller waiting.
		return p.plugin.exec(context.Background(), &credentialproviderapi.CredentialProviderRequest{
			Image: image, ServiceAccountToken: token, ServiceAccountAnnotations: annotations})
	})
	if err != nil {
		return nil, fmt.Errorf("failed to get credential from external registry credential provider: %w", err)
	}
	resp := res.(*credentialproviderapi.CredentialProviderResponse)
	if token != "" && p.sa.cacheType != cacheTypeToken {
		for _, a := range resp.Auth {
			if a.Password == token {
				return nil, fmt.Errorf("credential provider plugin returned the service account token as the password which is not allowed when service account cache type is not set to 'Token'")
			}
		}
	}
	var key string
	switch resp.CacheKeyType {
	case credentialproviderapi.ImagePluginCacheKeyType:
		key = image
	case credentialproviderapi.RegistryPluginCacheKeyType:
		key = parseRegistry(image)
	case credentialproviderapi.GlobalPluginCacheKeyType:
		key = globalCacheKey
	default:
		return nil, fmt.Errorf("credential provider plugin did not return a valid cacheKeyType: %s", resp.CacheKeyType)
	}
	// Credentials given for a service account's token are that account's
	// (the kubelet's ServiceAccountCoordinates), not the node's.
	var src *Source
	if token != "" {
		src = &Source{ServiceAccount: &Coordinates{UID: string(saUID), Namespace: pod.Namespace, Name: pod.ServiceAccountName}}
	}
	cfg := make(DockerConfig, len(resp.Auth))
	for loc, a := range resp.Auth {
		cfg[loc] = AuthConfig{Username: a.Username, Password: a.Password, Source: src}
	}
	var ttl time.Duration
	switch {
	case resp.CacheDuration != nil:
		ttl = resp.CacheDuration.Duration
	default:
		ttl = p.defaultCacheDuration
	}
	if ttl == 0 {
		return cfg, nil // 0: not cached at all
	}
	p.mu.Lock()
	p.cache[joinKey(key, saKey)] = cacheEntry{creds: cfg, expiresAt: p.clock.Now().Add(ttl)}
	p.mu.Unlock()
	return cfg, nil
}

// cached looks the image up by image, registry and global key, in that
// order; expired entries are dropped when met and all every 15 minutes.
func (p *provider) cached(image, saKey string) (DockerConfig, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.clock.Now()
	if now.After(p.lastPurge.Add(cachePurgeInterval)) {
		for k, e := range p.cache {
			if now.After(e.expiresAt) {
				delete(p.cache, k)
			}
		}
		p.lastPurge = now
	}
	for _, base := range []string{image, parseRegistry(image), globalCacheKey} {
		k := joinKey(base, saKey)
		e, ok := p.cache[k]
		if !ok {
			continue
		}
		if now.After(e.expiresAt) {
			delete(p.cache, k)
			continue
		}
		return e.creds, true
	}
	return nil, false
}

// parseRegistry is the image's registry host (with its port).
func parseRegistry(image string) string {
	host, _, _ := strings.Cut(image, "/")
	return host
}

// joinKey builds an unambiguous key from parts (each length-prefixed).
func joinKey(parts ...string) string {
	var b strings.Builder
	for _, s := range parts {
		fmt.Fprintf(&b, "%d:%s;", len(s), s)
	}
	return b.String()
}

func annotationsKey(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		parts = append(parts, k, m[k])
	}
	return joinKey(parts...)
}

// saProvider is a provider's service account token mode (tokenAttributes).
type saProvider struct {
	audience           string
	require            bool
	required, optional []string
	cacheType          string
	api                ServiceAccounts
	clock              clock.Clock

	mu     sync.Mutex
	tokens map[string]cachedToken // by pod and service account
}

type requiredAnnotationNotFound string

func (e requiredAnnotationNotFound) Error() string {
	return fmt.Sprintf("required annotation %s not found", string(e))
}

// data is the service account's UID and the annotations the plugin gets:
// every required one (else the plugin is not invoked), the optional ones
// present.
func (s *saProvider) data(ctx context.Context, ns, name string) (types.UID, map[string]string, error) {
	if s.api == nil {
		return "", nil, fmt.Errorf("no client for service accounts")
	}
	sa, err := s.api.ServiceAccount(ctx, ns, name)
	if err != nil {
		return "", nil, err
	}
	out := make(map[string]string, len(s.required)+len(s.optional))
	for _, k := range s.required {
		v, ok := sa.Annotations[k]
		if !ok {
			return "", nil, requiredAnnotationNotFound(k)
		}
		out[k] = v
	}
	for _, k := range s.optional {
		if v, ok := sa.Annotations[k]; ok {
			out[k] = v
		}
	}
	return sa.UID, out, nil
}

// token is a token of the pod's service account for the provider's
// audience, bound to the pod, of the API server's default lifetime. As the
// kubelet's token manager, a token is reused until 80% of its lifetime has
// passed (or 24 hours), so that the pulls of a pod's containers ask the API
// server once.
func (s *saProvider) token(ctx context.Context, pod Pod, uid types.UID) (string, error) {
	key := joinKey(pod.Namespace, pod.ServiceAccountName, string(uid), pod.Name, string(pod.UID))
	now := s.clock.Now()
	s.mu.Lock()
	for k, t := range s.tokens {
		if !now.Before(t.refreshAt) {
			delete(s.tokens, k)
		}
	}
	t, ok := s.tokens[key]
	s.mu.Unlock()
	if ok {
		return t.token, nil
	}
	tr, err := s.api.CreateToken(ctx, pod.Namespace, pod.ServiceAccountName, &authv1.TokenRequest{
		ObjectMeta: metav1.ObjectMeta{UID: uid},
		Spec: authv1.TokenRequestSpec{
			Audiences:      []string{s.audience},
			BoundObjectRef: &authv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
		},
	})
	if err != nil {
		return "", err
	}
	if tr.Spec.ExpirationSeconds != nil && !tr.Status.ExpirationTimestamp.IsZero() {
		ttl := time.Duration(*tr.Spec.ExpirationSeconds) * time.Second
		exp := tr.Status.ExpirationTimestamp.Time
		refresh := exp.Add(-ttl / 5)
		if maxAge := exp.Add(-ttl).Add(24 * time.Hour); maxAge.Before(refresh) {
			refresh = maxAge
		}
		s.mu.Lock()
		if s.tokens == nil {
			s.tokens = map[string]cachedToken{}
		}
		s.tokens[key] = cachedToken{token: tr.Status.Token, refreshAt: refresh}
		s.mu.Unlock()
	}
	return tr.Status.Token, nil
}

type cachedToken struct {
	token     string
	refreshAt time.Time
}

// execPlugin runs the plugin binary as the kubelet does:
//
//	ENV=VALUE... <bin-dir>/<name> args... <<<CredentialProviderRequest
//
// and reads its CredentialProviderResponse from stdout.
type execPlugin struct {
	name, apiVersion, binDir string
	encoder                  runtime.Encoder
	args                     []string
	env                      []configv1.ExecEnvVar
	timeout                  time.Duration
}

func (e *execPlugin) exec(ctx context.Context, req *credentialproviderapi.CredentialProviderRequest) (*credentialproviderapi.CredentialProviderResponse, error) {
	data, err := runtime.Encode(e.encoder, req)
	if err != nil {
		return nil, fmt.Errorf("failed to encode auth request: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, filepath.Join(e.binDir, e.name), e.args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(data), &stdout, &stderr
	// The system's environment first, the configuration's over it.
	cmd.Env = os.Environ()
	for _, v := range e.env {
		cmd.Env = append(cmd.Env, v.Name+"="+v.Value)
	}
	// A timed-out plugin is killed with whatever it started, and its
	// output not waited for past waitDelay: a pull never hangs on it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = waitDelay
	start := time.Now()
	err = cmd.Run()
	pluginDuration.WithLabelValues(e.name).Observe(time.Since(start).Seconds())
	if err != nil || ctx.Err() != nil {
		pluginErrors.WithLabelValues(e.name).Inc()
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("error execing credential provider plugin %s for image %s: %w", e.name, req.Image, ctx.Err())
	} else if err != nil {
		err = fmt.Errorf("error execing credential provider plugin %s for image %s: %w", e.name, req.Image, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr.String())
	}
	out := stdout.Bytes()
	gvk, err := json.DefaultMetaFactory.Interpret(out)
	if err != nil {
		return nil, fmt.Errorf("error reading GVK from response: %w", err)
	}
	if gvk.GroupVersion().String() != e.apiVersion {
		return nil, fmt.Errorf("apiVersion from credential plugin response did not match expected apiVersion:%s, actual apiVersion:%s", e.apiVersion, gvk.GroupVersion().String())
	}
	obj, gvk, err := codecs.UniversalDecoder().Decode(out, nil, nil)
	if err != nil {
		// Not wrapped: the response may hold credentials.
		return nil, errors.New("error decoding credential provider plugin response from stdout")
	}
	if gvk.Kind != "CredentialProviderResponse" {
		return nil, fmt.Errorf("failed to decode CredentialProviderResponse, unexpected Kind: %q", gvk.Kind)
	}
	if gvk.Group != credentialproviderapi.GroupName {
		return nil, fmt.Errorf("failed to decode CredentialProviderResponse, unexpected Group: %s", gvk.Group)
	}
	resp, ok := obj.(*credentialproviderapi.CredentialProviderResponse)
	if !ok {
		return nil, fmt.Errorf("unable to convert %T to *CredentialProviderResponse", obj)
	}
	return resp, nil
}
