package harness

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"time"
)

// BusyboxPath is Debian's busybox-static.
const BusyboxPath = "/usr/bin/busybox"

// WriteBusyboxImage writes a minimal OCI image archive (oci-layout,
// index.json, blobs) named ref, containing /bin/busybox from busybox-static
// and links for sh and a few applets. No registry is reachable here, so this
// is how tests get a shell image: import it with ImportImage.
func WriteBusyboxImage(path, ref string) error {
	bb, err := os.ReadFile(BusyboxPath)
	if err != nil {
		return fmt.Errorf("busybox-static: %w", err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	mtime := time.Unix(0, 0)
	for _, d := range []string{"bin/", "tmp/", "etc/", "proc/", "sys/", "dev/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode, ModTime: mtime}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb)), ModTime: mtime}); err != nil {
		return err
	}
	if _, err := tw.Write(bb); err != nil {
		return err
	}
	for _, applet := range []string{"sh", "sleep", "cat", "httpd", "echo", "ls", "env", "ip", "ping", "wget", "nc", "true", "false", "hostname", "id", "ps", "mount", "touch", "test"} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + applet, Linkname: "busybox", ModTime: mtime}); err != nil {
			return err
		}
	}
	for name, body := range map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
		"etc/group":  "root:x:0:\nnogroup:x:65534:\n",
	} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: mtime}); err != nil {
			return err
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return writeOCIArchive(path, ref, layer.Bytes(), map[string]any{
		"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		"Cmd": []string{"sh"},
	})
}

// WriteBinaryImage writes an OCI image archive named ref holding one static
// executable, /name, as its entrypoint: enough for a pause image that a CRI
// runtime needs as its sandbox image, which no registry can provide here.
func WriteBinaryImage(path, ref, name string, exe []byte) error {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(exe)), ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	if _, err := tw.Write(exe); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return writeOCIArchive(path, ref, layer.Bytes(), map[string]any{"Entrypoint": []string{"/" + name}})
}

// writeOCIArchive tars up an OCI image layout holding one single-layer
// image (uncompressed layer) for the host's platform.
func writeOCIArchive(path, ref string, layer []byte, config map[string]any) error {
	type desc struct {
		MediaType   string            `json:"mediaType"`
		Digest      string            `json:"digest"`
		Size        int               `json:"size"`
		Annotations map[string]string `json:"annotations,omitempty"`
	}
	blobs := map[string][]byte{}
	add := func(mediaType string, b []byte) desc {
		d := fmt.Sprintf("sha256:%x", sha256.Sum256(b))
		blobs[d[len("sha256:"):]] = b
		return desc{MediaType: mediaType, Digest: d, Size: len(b)}
	}
	layerDesc := add("application/vnd.oci.image.layer.v1.tar", layer)
	cfg, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       config,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	if err != nil {
		return err
	}
	cfgDesc := add("application/vnd.oci.image.config.v1+json", cfg)
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        cfgDesc,
		"layers":        []desc{layerDesc},
	})
	if err != nil {
		return err
	}
	mDesc := add("application/vnd.oci.image.manifest.v1+json", manifest)
	mDesc.Annotations = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref,
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []desc{mDesc},
	})
	if err != nil {
		return err
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	file := func(name string, b []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b))}); err != nil {
			return err
		}
		_, err := tw.Write(b)
		return err
	}
	if err := file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := file("index.json", index); err != nil {
		return err
	}
	for d, b := range blobs {
		if err := file("blobs/sha256/"+d, b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}
