package podspec

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	pathrs "github.com/cyphar/filepath-securejoin/pathrs-lite"
	log "github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// fileKeyRefValue is an env var's fileKeyRef (EnvFiles) as the kubelet
// resolves it: the key's value in an env file on one of the pod's volumes
// (an emptyDir an init container wrote). ok is false for an optional key
// the file lacks (or has empty), which leaves the variable out.
//
// The file is opened beneath the volume's directory: whatever the pod put
// there (a symlink out of the volume, a FIFO) reaches no host file and
// blocks nothing; the kubelet joins the path with filepath-securejoin.
func (r *Runtime) fileKeyRefValue(pod *v1.Pod, ref *v1.FileKeySelector) (string, bool, error) {
	optional := ref.Optional != nil && *ref.Optional
	var vol *v1.Volume
	for i := range pod.Spec.Volumes {
		if pod.Spec.Volumes[i].Name == ref.VolumeName {
			vol = &pod.Spec.Volumes[i]
		}
	}
	if vol == nil {
		return "", false, fmt.Errorf("cannot find the volume %q referenced by FileKeyRef", ref.VolumeName)
	}
	// The API allows emptyDir volumes only: the volume's own directory.
	root := r.volumeDir(pod, vol.Name)
	value, err := readEnvFile(root, ref.Path, ref.Key)
	if err != nil {
		log.WithError(err).WithField("pod", key(pod.Namespace, pod.Name)).Error("Failed to parse env file")
		return "", false, errors.New("couldn't parse env file")
	}
	if value == "" {
		if optional {
			return "", false, nil
		}
		return "", false, fmt.Errorf("environment variable key %q not found in file %q", ref.Key, filepath.Join(root, ref.Path))
	}
	return value, true, nil
}

// readEnvFile opens path beneath root, a regular file only, and returns
// key's value in it.
func readEnvFile(root, path, key string) (string, error) {
	h, err := pathrs.OpenInRoot(root, path)
	if err != nil {
		return "", fmt.Errorf("failed to open environment variable file %q: %w", path, err)
	}
	defer h.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(h.Fd()), &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", fmt.Errorf("environment variable file %q is not a regular file", path)
	}
	f, err := pathrs.Reopen(h, unix.O_RDONLY|unix.O_CLOEXEC)
	if err != nil {
		return "", err
	}
	defer f.Close()
	return parseEnv(f, key)
}

// parseEnv is the kubelet's strict env file parser (pkg/kubelet/util/env
// ParseEnv), a subset of POSIX shell: KEY='value' with the value in single
// quotes, taken literally and possibly over several lines; blank lines,
// leading whitespace, comment lines and comments after the closing quote
// allowed; whitespace before '=' an error, after it an empty value. The
// value of key ("" if absent) or the first error met before it.
func parseEnv(r io.Reader, key string) (string, error) {
	scanner := bufio.NewScanner(r)
	lineNum := 0
	for scanner.Scan() {
		lineNum++
		line := strings.TrimLeft(scanner.Text(), " \t")
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		eq := strings.Index(line, "=")
		if eq == -1 {
			return "", fmt.Errorf("invalid environment variable format at line %d: missing '='", lineNum)
		}
		namePart := line[:eq]
		name := strings.TrimRight(namePart, " \t")
		if name == "" {
			return "", fmt.Errorf("invalid environment variable format at line %d: empty variable name", lineNum)
		}
		if namePart != name {
			return "", fmt.Errorf("invalid environment variable format at line %d: whitespace before '=' is not allowed", lineNum)
		}
		valuePart := line[eq+1:]
		trimmed := strings.TrimLeft(valuePart, " \t")
		if valuePart != trimmed {
			// As the shell: KEY= 'v' sets KEY empty.
			if name == key {
				return "", nil
			}
			continue
		}
		if !strings.HasPrefix(trimmed, "'") {
			return "", fmt.Errorf("invalid environment variable format at line %d: value must be enclosed in single quotes", lineNum)
		}
		var value strings.Builder
		rest := trimmed[1:]
		start := lineNum
		for {
			if i := strings.Index(rest, "'"); i != -1 {
				value.WriteString(rest[:i])
				after := strings.TrimLeft(rest[i+1:], " \t")
				if after != "" && !strings.HasPrefix(after, "#") {
					return "", fmt.Errorf("invalid environment variable format at line %d: unexpected content after closing quote", lineNum)
				}
				if name == key {
					return value.String(), nil
				}
				break
			}
			value.WriteString(rest)
			value.WriteString("\n")
			if !scanner.Scan() {
				return "", fmt.Errorf("invalid environment variable format starting at line %d: unclosed single quote", start)
			}
			lineNum++
			rest = scanner.Text()
		}
	}
	if err := scanner.Err(); err != nil {
		return "", fmt.Errorf("error reading environment variable file: %w", err)
	}
	return "", nil
}
