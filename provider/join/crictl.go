package join

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/hostlet/hostlet/provider/cri"
)

// crictlFile is /etc/crictl.yaml pointing crictl at hostlet's CRI socket,
// as a kubelet node's points it at containerd's: written only where none
// exists (one of the operator's, or containerd's for its own CRI, is left
// alone), and not at all without a path or a socket.
func crictlFile(l Layout, flags map[string]string) (file, bool) {
	socket, set := flags["cri-socket"]
	if !set {
		socket = cri.DefaultSocket
	}
	if l.CrictlConfig == "" || socket == "" {
		return file{}, false
	}
	if _, err := os.Lstat(l.CrictlConfig); !errors.Is(err, fs.ErrNotExist) {
		return file{}, false
	}
	endpoint := "unix://" + socket
	data := fmt.Sprintf("runtime-endpoint: %s\nimage-endpoint: %s\n", endpoint, endpoint)
	return file{path: l.CrictlConfig, mode: 0o644, data: []byte(data)}, true
}
