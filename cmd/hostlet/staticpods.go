package main

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/hostlet/hostlet/provider/staticpod"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	cliflag "k8s.io/component-base/cli/flag"
)

// staticPodFlags are the kubelet's static pod sources.
type staticPodFlags struct {
	podManifestPath    string
	fileCheckFrequency time.Duration
	manifestURL        string
	manifestURLHeader  map[string][]string
	httpCheckFrequency time.Duration
}

func (s *staticPodFlags) flags(fs *pflag.FlagSet) {
	fs.StringVar(&s.podManifestPath, "pod-manifest-path", "", "file or directory of static pod manifests, run without the API server and mirrored to it (files starting with a dot are skipped)")
	fs.DurationVar(&s.fileCheckFrequency, "file-check-frequency", 20*time.Second, "how often --pod-manifest-path is listed again (it is also watched)")
	fs.StringVar(&s.manifestURL, "manifest-url", "", "URL serving static pods (a Pod or a PodList)")
	fs.Var(cliflag.NewColonSeparatedMultimapStringString(&s.manifestURLHeader), "manifest-url-header", "HTTP headers for --manifest-url, 'a:hello,b:again,c:world'; repeated names are sent in order; the flag may be repeated")
	fs.DurationVar(&s.httpCheckFrequency, "http-check-frequency", 20*time.Second, "how often --manifest-url is fetched")
}

// staticPodConfig checks the static pod sources.
func (s *staticPodFlags) staticPodConfig(nodeName string) (staticpod.Config, error) {
	if s.manifestURL != "" {
		u, err := url.Parse(s.manifestURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return staticpod.Config{}, fmt.Errorf("--manifest-url %q: not an http(s) URL", s.manifestURL)
		}
	}
	if (s.podManifestPath != "" && s.fileCheckFrequency <= 0) || (s.manifestURL != "" && s.httpCheckFrequency <= 0) {
		return staticpod.Config{}, fmt.Errorf("--file-check-frequency and --http-check-frequency must be positive")
	}
	header := http.Header{}
	for k, vs := range s.manifestURLHeader {
		for _, v := range vs {
			header.Add(k, v)
		}
	}
	return staticpod.Config{
		NodeName:     nodeName,
		ManifestPath: s.podManifestPath, FileCheckFrequency: s.fileCheckFrequency,
		ManifestURL: s.manifestURL, ManifestURLHeader: header, HTTPCheckFrequency: s.httpCheckFrequency,
	}, nil
}

// newStaticPods is the static pod manager over the node's informers.
func newStaticPods(cfg staticpod.Config, client kubernetes.Interface, pods, node cache.SharedIndexInformer, statuses staticpod.Statuses) *staticpod.Manager {
	cfg.Client, cfg.PodInformer, cfg.NodeInformer, cfg.Statuses = client, pods, node, statuses
	return staticpod.New(cfg)
}
