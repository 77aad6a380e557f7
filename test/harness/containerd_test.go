package harness

import (
	"os"
	"reflect"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

// The CRI's plugin dirs are CNIBinDir, then ExtraCNIBinDirs (a CNI
// DaemonSet's plugin delegates to the harness's bridge), in valid TOML.
func TestCRIConfigCNIBinDirs(t *testing.T) {
	dir := t.TempDir()
	path, err := WriteContainerdConfig(dir, &CRIConfig{SandboxImage: "pause:1", CNIBinDir: "/cni/bin",
		CNIConfDir: "/flannel/net.d", ExtraCNIBinDirs: []string{"/flannel/bin", `/with "quote"`}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Plugins map[string]struct {
			CNI struct {
				BinDirs []string `toml:"bin_dirs"`
				ConfDir string   `toml:"conf_dir"`
			} `toml:"cni"`
		} `toml:"plugins"`
	}
	if err := toml.Unmarshal(b, &cfg); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	cni := cfg.Plugins["io.containerd.cri.v1.runtime"].CNI
	if want := []string{"/cni/bin", "/flannel/bin", `/with "quote"`}; !reflect.DeepEqual(cni.BinDirs, want) || cni.ConfDir != "/flannel/net.d" {
		t.Errorf("cni = %+v, want bin_dirs %q and conf_dir /flannel/net.d", cni, want)
	}
}
