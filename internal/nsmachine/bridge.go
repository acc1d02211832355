package nsmachine

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"strings"
)

// ErrUnavailable reports that this machine cannot make namespace machines:
// not root, a tool missing, or namespaces refused (a container without
// CAP_SYS_ADMIN). The wrapped error says which.
var ErrUnavailable = errors.New("namespace machines are not available here")

// geteuid is os.Geteuid; tests replace it.
var geteuid = os.Geteuid

// sshdPath is the sshd binary machines run as their init.
const sshdPath = "/usr/sbin/sshd"

// sshdPrivsep is sshd's privilege separation directory: sshd exits at
// once without it (systemd's ssh.service makes it; a host that runs no
// sshd service may not have it).
var sshdPrivsep = "/run/sshd"

// Check reports, wrapping ErrUnavailable, everything that keeps this
// machine from making namespace machines, in one message with the fix of
// each; nil when it can (as far as can be told without making one).
func Check(isolated bool) error {
	var missing []string
	if uid := geteuid(); uid != 0 {
		missing = append(missing, fmt.Sprintf("it needs root (uid %d): network namespaces, veths and cgroups are root's", uid))
	}
	for _, p := range []struct{ tool, pkg string }{{"ip", "iproute2"}, {"unshare", "util-linux"}, {"mount", "mount"}, {"hostname", "hostname"}} {
		if _, err := exec.LookPath(p.tool); err != nil {
			missing = append(missing, fmt.Sprintf("%s is missing (apt-get install -y %s)", p.tool, p.pkg))
		}
	}
	if _, err := os.Stat(sshdPath); err != nil {
		missing = append(missing, fmt.Sprintf("%s is missing (apt-get install -y openssh-server)", sshdPath))
	}
	if st, err := os.Stat(sshdPrivsep); err != nil || !st.IsDir() {
		missing = append(missing, fmt.Sprintf("%s is missing (mkdir -p -m 0755 %s): sshd, the machines' init, exits at once without its privilege separation directory", sshdPrivsep, sshdPrivsep))
	}
	if isolated {
		for _, c := range controllers {
			if _, err := os.Stat(cgroupRoot + "/" + c + "/cgroup.procs"); err != nil {
				missing = append(missing, fmt.Sprintf("cgroup v1 controller %s is not mounted at %s/%s", c, cgroupRoot, c))
			}
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrUnavailable, strings.Join(missing, "; "))
	}
	return nil
}

// Bridge is a Linux bridge in the root namespace with an address on a
// private /24; machines are plugged into it.
type Bridge struct {
	// Name is the bridge's interface name.
	Name string `json:"name"`
	// Subnet is the /24's first three octets ("10.170.3"); the bridge
	// holds Subnet.1 and machines get Subnet.10 and up.
	Subnet string `json:"subnet"`
}

// Addr is the bridge's own address, from which the machines are reached
// and which they reach.
func (b Bridge) Addr() string { return b.Subnet + ".1" }

// HostAddr is the address of the i-th machine (i from 1: Subnet.(9+i)).
func (b Bridge) HostAddr(i int) string { return fmt.Sprintf("%s.%d", b.Subnet, 9+i) }

// CreateBridge makes a bridge called name on a /24 in 10.160.0.0–10.223.255.0
// that no route of this machine overlaps, and brings it up.
func CreateBridge(ctx context.Context, name string) (Bridge, error) {
	subnet, err := PickSubnet(ctx)
	if err != nil {
		return Bridge{}, fmt.Errorf("create bridge %s: %w", name, err)
	}
	b := Bridge{Name: name, Subnet: subnet}
	for _, args := range [][]string{
		// A bridge whose address is not set takes its lowest port's, so
		// each machine plugged in or removed could change it under the
		// others: their cached neighbour entry for the bridge went stale
		// and they reached nothing for seconds (a host declared lost in
		// the middle of a stop). Its own address never changes.
		{"link", "add", name, "address", bridgeMAC(), "type", "bridge"},
		{"addr", "add", b.Addr() + "/24", "dev", name},
		{"link", "set", name, "up"},
	} {
		if err := IP(ctx, args...); err != nil {
			_ = IP(context.WithoutCancel(ctx), "link", "del", name)
			return Bridge{}, fmt.Errorf("create bridge %s: %w", name, err)
		}
	}
	return b, nil
}

// Exists reports whether the bridge's interface is there.
func (b Bridge) Exists() bool { return LinkExists(b.Name) }

// Delete removes the bridge; a bridge already gone is no error.
func (b Bridge) Delete(ctx context.Context) error {
	if !b.Exists() {
		return nil
	}
	if err := IP(ctx, "link", "del", b.Name); err != nil && b.Exists() {
		return fmt.Errorf("delete bridge %s: %w", b.Name, err)
	}
	return nil
}

// LinkExists reports whether a network interface called name exists in this namespace.
func LinkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// IP runs ip with args and returns its error with its output.
func IP(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// PickSubnet returns "10.X.Y" for a /24 in 10.160.0.0–10.223.255.0 that no
// route of this machine (in any table) overlaps.
func PickSubnet(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return "", fmt.Errorf("pick subnet: ip route: %w", err)
	}
	var routes []*net.IPNet
	for line := range strings.Lines(string(out)) {
		for _, f := range strings.Fields(line) {
			if !strings.Contains(f, "/") {
				f += "/32"
			}
			if _, n, err := net.ParseCIDR(f); err == nil {
				if ones, _ := n.Mask.Size(); ones > 0 { // not "default"
					routes = append(routes, n)
				}
				break
			}
		}
	}
	for range 100 {
		x, y := 160+randInt(64), randInt(256)
		_, mine, _ := net.ParseCIDR(fmt.Sprintf("10.%d.%d.0/24", x, y))
		free := true
		for _, r := range routes {
			if r.Contains(mine.IP) || mine.Contains(r.IP) {
				free = false
				break
			}
		}
		if free {
			return fmt.Sprintf("10.%d.%d", x, y), nil
		}
	}
	return "", errors.New("pick subnet: no free /24 in 10.160-223.x.0")
}

// bridgeMAC is a random locally administered unicast MAC address.
func bridgeMAC() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // crypto/rand does not fail on Linux
	b[0] = b[0]&^0x01 | 0x02
	return net.HardwareAddr(b).String()
}

func randInt(n int64) int {
	v, err := rand.Int(rand.Reader, big.NewInt(n))
	if err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return int(v.Int64())
}
