package cri

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/url"
	"strings"

	log "github.com/sirupsen/logrus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// PullImage pulls into hostlet's containerd namespace, as containerd's
// CRI pulls into k8s.io on a kubelet node (crictl pull, agents that
// pre-pull): through hostlet's own puller (the node's registry hosts
// config, the peer mirror), with the request's credentials offered to the
// registry and nothing else (the kubelet's credential providers and pull
// secrets are the kubelet's, not the runtime's). The answer is the
// image's ID, its config digest, as containerd's.
func (s *server) PullImage(ctx context.Context, r *criapi.PullImageRequest) (*criapi.PullImageResponse, error) {
	ref := r.GetImage().GetImage()
	if ref == "" {
		return nil, status.Error(codes.InvalidArgument, "no image given")
	}
	auth := r.GetAuth()
	id, err := s.cfg.Images.PullCRIImage(ctx, ref, func(host string) (string, string, error) {
		return parseAuth(auth, host)
	})
	if err != nil {
		return nil, fmt.Errorf("failed to pull and unpack image %q: %w", ref, err)
	}
	log.WithFields(log.Fields{"image": ref, "id": id}).Info("CRI PullImage: pulled")
	return &criapi.PullImageResponse{ImageRef: id}, nil
}

// parseAuth is the user and secret an AuthConfig offers host, as
// containerd's CRI reads it: none for another server_address's host; a
// username and password, else an identity token (as the secret, no
// user), else auth's base64 "user:password"; an empty one is anonymous.
func parseAuth(auth *criapi.AuthConfig, host string) (string, string, error) {
	if auth == nil {
		return "", "", nil
	}
	if auth.ServerAddress != "" {
		// crictl --creds and --auth send none. As containerd's, the
		// address is read as a URL: one without a scheme names no host,
		// and offers nothing.
		u, err := url.Parse(auth.ServerAddress)
		if err != nil {
			return "", "", fmt.Errorf("parse server address: %w", err)
		}
		if u.Host != host {
			return "", "", nil
		}
	}
	switch {
	case auth.Username != "":
		return auth.Username, auth.Password, nil
	case auth.IdentityToken != "":
		return "", auth.IdentityToken, nil
	case auth.Auth != "":
		decoded, err := base64.StdEncoding.DecodeString(auth.Auth)
		if err != nil {
			return "", "", err
		}
		user, password, ok := strings.Cut(string(decoded), ":")
		if !ok {
			return "", "", fmt.Errorf("invalid decoded auth: %q", decoded)
		}
		return user, strings.Trim(password, "\x00"), nil
	}
	return "", "", nil
}

// RemoveImage removes an image as containerd's CRI does (crictl rmi): by
// ID, a prefix of it or any of its names, every name of it, whether or
// not containers use it (their snapshots are their own; the kubelet's
// image GC is what spares images in use); one not found is no error.
func (s *server) RemoveImage(ctx context.Context, r *criapi.RemoveImageRequest) (*criapi.RemoveImageResponse, error) {
	imgs, err := s.cfg.Images.CRIImages(ctx)
	if err != nil {
		return nil, err
	}
	img, ok := resolveImage(imgs, r.GetImage().GetImage())
	if !ok {
		return &criapi.RemoveImageResponse{}, nil
	}
	if err := s.cfg.Images.RemoveImage(ctx, img.ID); err != nil {
		return nil, fmt.Errorf("failed to delete image %q: %w", img.ConfigDigest, err)
	}
	log.WithFields(log.Fields{"image": r.GetImage().GetImage(), "id": img.ConfigDigest}).Info("CRI RemoveImage: removed")
	return &criapi.RemoveImageResponse{}, nil
}
