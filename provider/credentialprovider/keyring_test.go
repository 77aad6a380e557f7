package credentialprovider

import (
	"reflect"
	"testing"
)

// The kubelet's URL glob rules (its TestURLsMatch cases).
func TestURLsMatch(t *testing.T) {
	for _, c := range []struct {
		glob, target string
		want         bool
	}{
		{"*.kubernetes.io", "prefix.kubernetes.io", true},
		{"prefix.*.io", "prefix.kubernetes.io", true},
		{"prefix.kubernetes.*", "prefix.kubernetes.io", true},
		{"*-good.kubernetes.io", "prefix-good.kubernetes.io", true},
		{"*.kubernetes.io", "kubernetes.io", false},
		{"*.*.kubernetes.io", "prefix.kubernetes.io", false},
		{"*.kubernetes.io", "a.b.kubernetes.io", false},
		{"*.kubernetes.io/foo", "prefix.kubernetes.io/foo/bar", true},
		{"*.kubernetes.io/foo", "prefix.kubernetes.io/bar", false},
		{"kubernetes.io:8080", "kubernetes.io:8080/foo", true},
		{"kubernetes.io:8080", "kubernetes.io/foo", false},
		{"kubernetes.io", "kubernetes.io:8080/foo", false},
		{"*.dkr.ecr.*.amazonaws.com", "123456789012.dkr.ecr.us-west-2.amazonaws.com/app", true},
		{"*.dkr.ecr.*.amazonaws.com", "123456789012.dkr.ecr.us-west-2.amazonaws.com.cn/app", false},
		{"127.0.0.1:*", "127.0.0.1:5000/app", false}, // no wildcard ports
	} {
		got, _ := URLsMatchStr(c.glob, c.target)
		if got != c.want {
			t.Errorf("URLsMatch(%q, %q) = %v, want %v", c.glob, c.target, got, c.want)
		}
	}
}

func TestKeyringLookup(t *testing.T) {
	k := &Keyring{}
	k.Add(DockerConfig{
		"quay.io":                          {Username: "quay"},
		"quay.io/coreos":                   {Username: "coreos"},
		"https://index.docker.io/v1/":      {Username: "hub"},
		"http://registry.local:5000/v2/":   {Username: "local"},
		"%zz://bad":                        {Username: "bad"},
		"*.registry.example.com/team/repo": {Username: "glob"},
	})
	k.Add(DockerConfig{"quay.io": {Username: "quay2"}})
	for _, c := range []struct {
		image string
		want  []string
	}{
		// The more specific location first; two of one location in order.
		{"quay.io/coreos/etcd", []string{"coreos", "quay", "quay2"}},
		{"quay.io/other/x", []string{"quay", "quay2"}},
		{"docker.io/library/busybox", []string{"hub"}},
		{"busybox", []string{"hub"}},
		{"user/app", []string{"hub"}},
		{"registry.local:5000/app", []string{"local"}},
		{"registry.local/app", nil},
		{"eu.registry.example.com/team/repo/img", []string{"glob"}},
		{"eu.registry.example.com/other", nil},
		{"ghcr.io/x/y", nil},
	} {
		var got []string
		for _, a := range k.Lookup(c.image) {
			got = append(got, a.Username)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("Lookup(%q) = %v, want %v", c.image, got, c.want)
		}
	}
}
