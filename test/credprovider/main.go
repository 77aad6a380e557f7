// Command credprovider is a kubelet credential provider plugin for the e2e
// tests (the credentialprovider.kubelet.k8s.io/v1 exec protocol): it reads
// the CredentialProviderRequest on stdin and answers credentials for the
// image's registry.
//
//	credprovider --user U [--calls FILE] [--cache-key-type Registry] [--cache-duration 5m]
//	credprovider --user-from-annotation KEY [--calls FILE] ...
//	credprovider --fail MESSAGE
//
// The password is $CREDPROVIDER_PASSWORD (the configuration's env). Each
// request's image (and whether it carried a service account token) is
// appended to --calls, one a line, so a test can count the plugin's runs.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
)

type request struct {
	APIVersion                string            `json:"apiVersion"`
	Kind                      string            `json:"kind"`
	Image                     string            `json:"image"`
	ServiceAccountToken       string            `json:"serviceAccountToken,omitempty"`
	ServiceAccountAnnotations map[string]string `json:"serviceAccountAnnotations,omitempty"`
}

type authConfig struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

type response struct {
	APIVersion    string                `json:"apiVersion"`
	Kind          string                `json:"kind"`
	CacheKeyType  string                `json:"cacheKeyType"`
	CacheDuration string                `json:"cacheDuration,omitempty"`
	Auth          map[string]authConfig `json:"auth"`
}

func main() {
	user := flag.String("user", "", "user name to answer")
	calls := flag.String("calls", "", "file each request's image is appended to")
	keyType := flag.String("cache-key-type", "Registry", "cacheKeyType to answer")
	duration := flag.String("cache-duration", "", "cacheDuration to answer (empty: none, the configuration's default)")
	fail := flag.String("fail", "", "fail with this message on stderr")
	userAnnotation := flag.String("user-from-annotation", "", "answer the user name in this annotation of the pod's service account, which needs a token (service account token mode)")
	flag.Parse()
	var req request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		fmt.Fprintln(os.Stderr, "credprovider: reading the request:", err)
		os.Exit(1)
	}
	if req.Kind != "CredentialProviderRequest" || req.APIVersion != "credentialprovider.kubelet.k8s.io/v1" {
		fmt.Fprintf(os.Stderr, "credprovider: unexpected request %s %s\n", req.APIVersion, req.Kind)
		os.Exit(1)
	}
	if *calls != "" {
		f, err := os.OpenFile(*calls, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(f, "%s token=%t\n", req.Image, req.ServiceAccountToken != "")
			f.Close()
		}
	}
	if *fail != "" {
		fmt.Fprintln(os.Stderr, *fail)
		os.Exit(1)
	}
	if *userAnnotation != "" {
		if req.ServiceAccountToken == "" {
			fmt.Fprintln(os.Stderr, "credprovider: no service account token")
			os.Exit(1)
		}
		*user = req.ServiceAccountAnnotations[*userAnnotation]
	}
	registry, _, _ := strings.Cut(req.Image, "/")
	resp := response{
		APIVersion: req.APIVersion, Kind: "CredentialProviderResponse",
		CacheKeyType: *keyType, CacheDuration: *duration,
		Auth: map[string]authConfig{registry: {Username: *user, Password: os.Getenv("CREDPROVIDER_PASSWORD")}},
	}
	if err := json.NewEncoder(os.Stdout).Encode(resp); err != nil {
		os.Exit(1)
	}
}
