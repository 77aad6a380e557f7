package runtime

import (
	"os"
	"strings"
	"time"

	log "github.com/sirupsen/logrus"
)

// A container's crash-loop back-off is recorded on it (labelBackoff), so a
// restarted hostlet keeps restarting a crashing container no faster than
// before. The kubelet keeps it in memory: after a reboot of the host its
// containers start at once, as the host's crash ended them, not their own.
// So the record holds the boot it was made in, and one of another boot
// does not count.

// bootIDFile holds the kernel's random ID of the current boot.
const bootIDFile = "/proc/sys/kernel/random/boot_id"

// readBootID is the current boot's ID, "" if the kernel does not tell
// (then every record counts, as before the boot was recorded).
func readBootID(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		log.WithError(err).Warn("no boot ID: crash-loop back-off is kept across reboots")
		return ""
	}
	return strings.TrimSpace(string(b))
}

// backoffLabel is labelBackoff's value.
func backoffLabel(applied, next time.Duration, boot string) string {
	return applied.String() + "/" + next.String() + "/" + boot
}

// parseBackoff reads labelBackoff's value: zero when there is none or it
// was recorded in another boot than boot. A record without a boot (a
// hostlet of before the boot was recorded, updated without a reboot)
// counts.
func parseBackoff(v, boot string) (applied, next time.Duration) {
	parts := strings.Split(v, "/")
	if len(parts) < 2 || (len(parts) > 2 && parts[2] != boot) {
		return 0, 0
	}
	applied, _ = time.ParseDuration(parts[0])
	next, _ = time.ParseDuration(parts[1])
	return applied, next
}
