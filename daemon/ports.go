package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/scavenger-ml/scavenger/internal/userdb"
)

// checkPort fails at once, naming the holder, when the TCP address addr
// (a listener scavd is about to open: NATS, /metrics, the API, the routes)
// is taken: another process bound it first (another scavd, or a user who
// means to keep this one from starting). Port 0 is never taken.
func checkPort(what, addr string) error {
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "0" {
		return nil
	}
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln.Close()
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		return nil // the listener itself says what is wrong
	}
	return fmt.Errorf("%s: address %s is in use by %s: stop it, or give scavd another address", what, addr, portHolder(addr))
}

// portHolder names the process listening on addr's port: its pid, command
// and user, from /proc (root sees every process; another user only theirs).
func portHolder(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	port, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return "another process"
	}
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fs := strings.Fields(sc.Text())
			// sl local_address rem_address st ... inode (the 10th field)
			if len(fs) < 10 || fs[3] != "0A" { // LISTEN
				continue
			}
			if _, hexPort, ok := strings.Cut(fs[1], ":"); ok {
				if n, err := strconv.ParseUint(hexPort, 16, 16); err == nil && n == port {
					inodes["socket:["+fs[9]+"]"] = true
				}
			}
		}
		fh.Close()
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range procs {
		if target, err := os.Readlink(fd); err == nil && inodes[target] {
			pid := strings.Split(fd, "/")[2]
			comm, _ := os.ReadFile("/proc/" + pid + "/comm")
			who := ""
			if st, err := os.Stat("/proc/" + pid); err == nil {
				if sys, ok := st.Sys().(*syscall.Stat_t); ok {
					who = ", uid " + strconv.FormatUint(uint64(sys.Uid), 10)
					if o, found := userdb.ByID(sys.Uid, 0); found {
						who = ", user " + o.User
					}
				}
			}
			return fmt.Sprintf("pid %s (%s%s)", pid, strings.TrimSpace(string(comm)), who)
		}
	}
	return "a process this user cannot see"
}
