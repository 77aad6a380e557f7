// Package logind is a small stand-in for systemd-logind on a private D-Bus
// system bus, for testing graceful node shutdown where systemd cannot run:
// it starts a real dbus-daemon, owns org.freedesktop.login1, hands out
// inhibitor locks (pipe fds, as logind does) through Manager.Inhibit,
// serves InhibitDelayMaxUSec, and emits PrepareForShutdown on request.
package logind

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/godbus/dbus/v5"
)

const (
	service = "org.freedesktop.login1"
	object  = dbus.ObjectPath("/org/freedesktop/login1")
	manager = "org.freedesktop.login1.Manager"
)

// busConfig lets anyone (the test runs as root) own names and call methods.
const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`

// Lock is one inhibitor lock handed out.
type Lock struct {
	What, Who, Why, Mode string
	// Inode identifies the pipe whose write end the holder got.
	Inode uint64
}

// Logind is the running stand-in.
type Logind struct {
	// Address is the bus address, for DBUS_SYSTEM_BUS_ADDRESS.
	Address string

	daemon *exec.Cmd
	conn   *dbus.Conn
	delay  time.Duration

	mu    sync.Mutex
	locks []Lock
	pipes []*os.File // read ends, kept so the pipes live
}

// Start runs dbus-daemon with a config in dir and registers the stand-in
// on it. delay is what InhibitDelayMaxUSec reports.
func Start(ctx context.Context, dir string, delay time.Duration) (*Logind, error) {
	sock := filepath.Join(dir, "system_bus_socket")
	cfg := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(busConfig, sock)), 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command("dbus-daemon", "--config-file="+cfg, "--nofork", "--print-address")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("dbus-daemon: %w", err)
	}
	l := &Logind{daemon: cmd, delay: delay}
	addr := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(out).ReadString('\n')
		addr <- strings.TrimSpace(line)
	}()
	select {
	case l.Address = <-addr:
	case <-ctx.Done():
		l.Close()
		return nil, ctx.Err()
	}
	if l.Address == "" {
		l.Close()
		return nil, fmt.Errorf("dbus-daemon printed no address")
	}
	if l.conn, err = dbus.Connect(l.Address); err != nil {
		l.Close()
		return nil, err
	}
	if reply, err := l.conn.RequestName(service, dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		l.Close()
		return nil, fmt.Errorf("owning %s: %v (reply %v)", service, err, reply)
	}
	if err := l.conn.Export(managerObj{l}, object, manager); err != nil {
		l.Close()
		return nil, err
	}
	if err := l.conn.Export(propsObj{l}, object, "org.freedesktop.DBus.Properties"); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Close stops the stand-in and its bus.
func (l *Logind) Close() {
	if l.conn != nil {
		l.conn.Close()
	}
	if l.daemon.Process != nil {
		_ = l.daemon.Process.Kill()
		_ = l.daemon.Wait()
	}
	l.mu.Lock()
	for _, f := range l.pipes {
		f.Close()
	}
	l.pipes = nil
	l.mu.Unlock()
}

// Locks returns the inhibitor locks handed out so far.
func (l *Logind) Locks() []Lock {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Lock(nil), l.locks...)
}

// HeldBy returns the locks process pid still holds open.
func (l *Logind) HeldBy(pid int) []Lock {
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	open := map[string]bool{}
	for _, fd := range fds {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil {
			open[target] = true
		}
	}
	var out []Lock
	for _, lk := range l.Locks() {
		if open[fmt.Sprintf("pipe:[%d]", lk.Inode)] {
			out = append(out, lk)
		}
	}
	return out
}

// PrepareForShutdown emits the signal logind sends before (active) or on
// cancelling (!active) a shutdown.
func (l *Logind) PrepareForShutdown(active bool) error {
	return l.conn.Emit(object, manager+".PrepareForShutdown", active)
}

type managerObj struct{ l *Logind }

// Inhibit hands out the write end of a pipe, as logind does; the lock is
// held until every copy of it is closed.
func (m managerObj) Inhibit(what, who, why, mode string) (dbus.UnixFD, *dbus.Error) {
	r, w, err := os.Pipe()
	if err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(w.Fd()), &st); err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	m.l.mu.Lock()
	m.l.locks = append(m.l.locks, Lock{What: what, Who: who, Why: why, Mode: mode, Inode: st.Ino})
	m.l.pipes = append(m.l.pipes, r)
	m.l.mu.Unlock()
	// godbus sends the reply (and with it a copy of the fd) after this
	// returns; our copy is closed once that surely happened.
	go func() {
		time.Sleep(5 * time.Second)
		w.Close()
	}()
	return dbus.UnixFD(w.Fd()), nil
}

type propsObj struct{ l *Logind }

func (p propsObj) Get(iface, name string) (dbus.Variant, *dbus.Error) {
	if iface == manager && name == "InhibitDelayMaxUSec" {
		return dbus.MakeVariant(uint64(p.l.delay / time.Microsecond)), nil
	}
	return dbus.Variant{}, dbus.MakeFailedError(fmt.Errorf("unknown property %s.%s", iface, name))
}

func (p propsObj) GetAll(iface string) (map[string]dbus.Variant, *dbus.Error) {
	if iface != manager {
		return map[string]dbus.Variant{}, nil
	}
	return map[string]dbus.Variant{"InhibitDelayMaxUSec": dbus.MakeVariant(uint64(p.l.delay / time.Microsecond))}, nil
}
