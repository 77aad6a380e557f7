package join

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

const unitName = "hostlet.service"

// unitFile runs hostlet from its KubeletConfiguration and its flags file
// (as kubeadm's drop-in runs the kubelet from config.yaml and
// kubeadm-flags.env); containerd must run first and stopping containerd
// stops hostlet (Requires), as for the kubelet. hostlet tells systemd when
// the node is registered and serving (Type=notify: READY=1) and pings its
// watchdog at half WatchdogSec while its health checks pass, so a hung
// hostlet is killed and restarted; 30s is the kubelet's documented
// example (https://kubernetes.io/docs/reference/node/systemd-watchdog/).
func unitFile(l Layout, executable string) file {
	unit := fmt.Sprintf(`# Written by hostlet join; hostlet leave removes it.
[Unit]
Description=hostlet: this host as a Kubernetes node
Documentation=https://github.com/hostlet/hostlet
Wants=network-online.target
After=network-online.target containerd.service
Requires=containerd.service

[Service]
Type=notify
WatchdogSec=30s
EnvironmentFile=-%s
ExecStart=%s --config %s $%s
Restart=always
RestartSec=5

[Install]
WantedBy=multi-user.target
`, l.FlagsFile(), executable, l.ConfigFile(), flagsVar)
	return file{path: l.UnitFile(), mode: 0o644, data: []byte(unit)}
}

// systemdRuns is how systemd itself tells (sd_booted).
func systemdRuns() bool {
	st, err := os.Stat("/run/systemd/system")
	return err == nil && st.IsDir()
}

func systemctl(args ...string) error {
	out, err := exec.Command("systemctl", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("systemctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
