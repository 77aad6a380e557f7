// Package objects reads the ConfigMaps, Secrets and service account tokens
// the node's pods refer to: with a GET per read (Client) or one watch per
// object (Cache), and once per container start or volume setup (Refs).
package objects

import (
	"context"

	authv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
)

// NewClient reads pods' objects from the API with the node's client.
func NewClient(client kubernetes.Interface) Client { return Client{client} }

// Client reads pods' objects from the API: a GET per read.
type Client struct{ c kubernetes.Interface }

func (a Client) ConfigMap(ctx context.Context, ns, name string) (*v1.ConfigMap, error) {
	return a.c.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
}

func (a Client) Secret(ctx context.Context, ns, name string) (*v1.Secret, error) {
	return a.c.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
}

func (a Client) CreateToken(ctx context.Context, ns, sa string, req *authv1.TokenRequest) (*authv1.TokenRequest, error) {
	return a.c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, req, metav1.CreateOptions{})
}

// Getter reads ConfigMaps and Secrets by name (Client, Cache).
type Getter interface {
	ConfigMap(ctx context.Context, namespace, name string) (*v1.ConfigMap, error)
	Secret(ctx context.Context, namespace, name string) (*v1.Secret, error)
}

// Refs fetches the ConfigMaps and Secrets one container start (or one
// volume setup) refers to, each once.
type Refs struct {
	api        Getter
	ns         string
	configMaps map[string]*v1.ConfigMap
	secrets    map[string]*v1.Secret
}

// NewRefs fetches the objects of namespace ns from api, each once.
func NewRefs(api Getter, ns string) *Refs {
	return &Refs{api: api, ns: ns, configMaps: map[string]*v1.ConfigMap{}, secrets: map[string]*v1.Secret{}}
}

func (o *Refs) ConfigMap(ctx context.Context, name string) (*v1.ConfigMap, error) {
	if cm, ok := o.configMaps[name]; ok {
		return cm, nil
	}
	cm, err := o.api.ConfigMap(ctx, o.ns, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			// The kubelet's object managers word it with the singular.
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmap"}, name)
		}
		return nil, err
	}
	o.configMaps[name] = cm
	return cm, nil
}

func (o *Refs) Secret(ctx context.Context, name string) (*v1.Secret, error) {
	if s, ok := o.secrets[name]; ok {
		return s, nil
	}
	s, err := o.api.Secret(ctx, o.ns, name)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secret"}, name)
		}
		return nil, err
	}
	o.secrets[name] = s
	return s, nil
}

// Optional fetches the object a reference of the pod spec names (env,
// envFrom, volumes, projections) with the kubelet's optional semantics: a
// missing object of an optional reference is skipped (ok false, no error).
// Only a missing object is excused, never a failing apiserver.
func Optional[T any](ctx context.Context, get func(context.Context, string) (T, error), name string, optional *bool) (obj T, ok bool, err error) {
	obj, err = get(ctx, name)
	if err != nil {
		if IsOptional(optional) && apierrors.IsNotFound(err) {
			return obj, false, nil
		}
		return obj, false, err
	}
	return obj, true, nil
}

// IsOptional says whether a reference's optional is set and true.
func IsOptional(b *bool) bool { return b != nil && *b }
