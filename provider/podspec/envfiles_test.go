package podspec

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/hostlet/hostlet/kubeletconfig"
	"golang.org/x/sys/unix"
)

// The kubelet's ParseEnv cases.
func TestParseEnv(t *testing.T) {
	for _, c := range []struct {
		name, file, key, want, err string
	}{
		{"simple", "A='1'\nB='2'\n", "B", "2", ""},
		{"absent", "A='1'\n", "B", "", ""},
		{"comments and blanks", "# c\n\n   \n  A='x y' # trailing\n", "A", "x y", ""},
		{"multi-line", "A='one\ntwo\nthree'\nB='b'", "A", "one\ntwo\nthree", ""},
		{"literal", `A='$HOME \n "q"'`, "A", `$HOME \n "q"`, ""},
		{"space after =", "A= 'v'\n", "A", "", ""},
		{"space after = other key", "A= 'v'\nB='b'\n", "B", "b", ""},
		{"space before =", "A ='v'\n", "A", "", "invalid environment variable format at line 1: whitespace before '=' is not allowed"},
		{"no =", "A\n", "A", "", "invalid environment variable format at line 1: missing '='"},
		{"empty name", "='v'\n", "A", "", "invalid environment variable format at line 1: empty variable name"},
		{"unquoted", "A=v\n", "A", "", "invalid environment variable format at line 1: value must be enclosed in single quotes"},
		{"after quote", "A='v' x\n", "A", "", "invalid environment variable format at line 1: unexpected content after closing quote"},
		{"unclosed", "X='1'\nA='v\nmore\n", "A", "", "invalid environment variable format starting at line 2: unclosed single quote"},
		{"error after the key", "A='1'\nbroken\n", "A", "1", ""},
		{"error before the key", "broken\nA='1'\n", "A", "", "invalid environment variable format at line 1: missing '='"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseEnv(strings.NewReader(c.file), c.key)
			if c.err != "" {
				if err == nil || err.Error() != c.err {
					t.Fatalf("error %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// The file is read beneath the volume: a symlink out of it reaches
// nothing of the host's, a FIFO is refused rather than read.
func TestReadEnvFileBeneath(t *testing.T) {
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(outside, []byte("K='host'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ok.env"), []byte("K='pod'\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "abs.env")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../../../.."+outside, filepath.Join(root, "rel.env")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "fifo.env"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v, err := readEnvFile(root, "ok.env", "K"); err != nil || v != "pod" {
		t.Fatalf("ok: %q, %v", v, err)
	}
	for _, p := range []string{"abs.env", "rel.env", "../" + filepath.Base(filepath.Dir(outside)) + "/host-secret"} {
		if v, err := readEnvFile(root, p, "K"); v == "host" {
			t.Errorf("%s: read the host's file (%v)", p, err)
		}
	}
	if _, err := readEnvFile(root, "fifo.env", "K"); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("fifo: %v", err)
	}
}

func TestFileKeyRef(t *testing.T) {
	r := New(Config{RootDir: t.TempDir()})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1"},
		Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "cfg", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}}}}}
	dir := r.volumeDir(pod, "cfg")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "app.env"), []byte("DB='db.local'\nEMPTY=''\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ref := func(vol, key string, optional bool) *v1.EnvVarSource {
		return &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: vol, Path: "app.env", Key: key, Optional: ptr.To(optional)}}
	}
	for _, c := range []struct {
		name string
		src  *v1.EnvVarSource
		v    string
		ok   bool
		err  string
	}{
		{"found", ref("cfg", "DB", false), "db.local", true, ""},
		{"missing", ref("cfg", "NOPE", false), "", false, `environment variable key "NOPE" not found in file "` + filepath.Join(dir, "app.env") + `"`},
		{"missing optional", ref("cfg", "NOPE", true), "", false, ""},
		{"empty is missing", ref("cfg", "EMPTY", false), "", false, `environment variable key "EMPTY" not found`},
		{"no volume", ref("other", "DB", false), "", false, `cannot find the volume "other" referenced by FileKeyRef`},
		{"no file", &v1.EnvVarSource{FileKeyRef: &v1.FileKeySelector{VolumeName: "cfg", Path: "none.env", Key: "DB"}}, "", false, "couldn't parse env file"},
	} {
		v, ok, err := r.envValueFrom(context.Background(), pod, &v1.Container{}, c.src, nil, nil)
		if c.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), c.err) {
				t.Errorf("%s: error %v, want %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || v != c.v || ok != c.ok {
			t.Errorf("%s: %q %v %v", c.name, v, ok, err)
		}
	}
	// The gate off: the kubelet sets the variable empty.
	g := kubeletconfig.NewFeatureGate()
	if err := g.SetFromMap(map[string]bool{"EnvFiles": false}); err != nil {
		t.Fatal(err)
	}
	r.cfg.Gates = g
	if v, ok, err := r.envValueFrom(context.Background(), pod, &v1.Container{}, ref("cfg", "DB", false), nil, nil); v != "" || !ok || err != nil {
		t.Errorf("gate off: %q %v %v", v, ok, err)
	}
}
