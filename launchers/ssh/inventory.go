package ssh

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
)

// DefaultPort is the SSH port of a Host that names none.
const DefaultPort = 22

// Host is one machine of the inventory workers may run on.
type Host struct {
	// Addr is the host name or IP address to dial; it is also the
	// MASTER_ADDR the workers see when the host is the first one used.
	Addr string
	// Port is the SSH port (DefaultPort when 0).
	Port int
	// User is the login user (the launcher's Options.User, else "root", when empty).
	User string
	// Slots is how many workers the host takes (1 when 0).
	Slots int
}

// String formats h as an inventory line: user@addr:port slots=N.
func (h Host) String() string {
	s := net.JoinHostPort(h.Addr, strconv.Itoa(h.port()))
	if h.User != "" {
		s = h.User + "@" + s
	}
	return s + " slots=" + strconv.Itoa(h.slots())
}

// dialAddr is host:port for dialing and known_hosts.
func (h Host) dialAddr() string { return net.JoinHostPort(h.Addr, strconv.Itoa(h.port())) }

func (h Host) port() int {
	if h.Port == 0 {
		return DefaultPort
	}
	return h.Port
}

func (h Host) slots() int {
	if h.Slots == 0 {
		return 1
	}
	return h.Slots
}

// ParseHost parses one host in the inventory syntax, as a file line or a
// flag value: "[user@]addr[:port] [slots=N]" (an IPv6 address with a port
// is written "[addr]:port"; fields may also be separated by commas, so
// "root@10.0.0.1:2222,slots=4" is one flag value).
func ParseHost(s string) (Host, error) {
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == '\t' || r == ',' })
	if len(fields) == 0 {
		return Host{}, fmt.Errorf("parse host %q: %w: empty", s, ErrInventory)
	}
	var h Host
	target := fields[0]
	if user, rest, ok := strings.Cut(target, "@"); ok {
		if user == "" {
			return Host{}, fmt.Errorf("parse host %q: %w: empty user", s, ErrInventory)
		}
		h.User, target = user, rest
	}
	if host, port, err := net.SplitHostPort(target); err == nil {
		p, perr := strconv.Atoi(port)
		if perr != nil || p < 1 || p > 65535 {
			return Host{}, fmt.Errorf("parse host %q: %w: bad port %q", s, ErrInventory, port)
		}
		h.Addr, h.Port = host, p
	} else {
		h.Addr = strings.TrimSuffix(strings.TrimPrefix(target, "["), "]")
	}
	if h.Addr == "" || strings.ContainsAny(h.Addr, "@/ ") {
		return Host{}, fmt.Errorf("parse host %q: %w: bad address %q", s, ErrInventory, h.Addr)
	}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k != "slots" {
			return Host{}, fmt.Errorf("parse host %q: %w: unknown field %q (want slots=N)", s, ErrInventory, f)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return Host{}, fmt.Errorf("parse host %q: %w: slots %q is not a positive number", s, ErrInventory, v)
		}
		h.Slots = n
	}
	if h.Slots == 0 {
		h.Slots = 1
	}
	return h, nil
}

// ParseHosts parses flag values (for example a repeated --host flag), each
// one host in ParseHost's syntax, and reports every bad one.
func ParseHosts(values []string) ([]Host, error) {
	var hosts []Host
	var errs []string
	for _, v := range values {
		h, err := ParseHost(v)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		hosts = append(hosts, h)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInventory, strings.Join(errs, "; "))
	}
	return hosts, nil
}

// ParseInventory reads an inventory: one host a line in ParseHost's syntax;
// blank lines and everything after a '#' are ignored. Every bad line is
// reported, with its number.
func ParseInventory(r io.Reader) ([]Host, error) {
	var hosts []Host
	var errs []string
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if strings.TrimSpace(line) == "" {
			continue
		}
		h, err := ParseHost(line)
		if err != nil {
			errs = append(errs, fmt.Sprintf("line %d: %v", n, err))
			continue
		}
		hosts = append(hosts, h)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read inventory: %w", err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInventory, strings.Join(errs, "; "))
	}
	return hosts, nil
}

// LoadInventory reads the inventory file at path (see ParseInventory).
func LoadInventory(path string) ([]Host, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load inventory %s: %w", path, err)
	}
	defer f.Close()
	hosts, err := ParseInventory(f)
	if err != nil {
		return nil, fmt.Errorf("load inventory %s: %w", path, err)
	}
	return hosts, nil
}
