package provider

import (
	"fmt"
	"strings"
	"time"
)

// DefaultOrphanTimeout is how long an instance outlives the last SSH
// connection of the scavd that owns it (scavd's --cloud-orphan-timeout).
const DefaultOrphanTimeout = 15 * time.Minute

// WatchdogScript is a POSIX sh script that runs on an instance and ends it
// with halt (a shell command: "shutdown -h now", or the local cloud's
// "kill -TERM 1") once no SSH connection to it has been open for timeout.
// The launcher of the scavd that owns an instance keeps a connection to it
// open while it runs (its notices, its workers' sessions), so an instance
// whose scavd is gone for good ends itself — the autostop SkyPilot users
// rely on — while a scavd restart, which reconnects within seconds, leaves
// it running. It reads the established TCP connections to port 22 in
// /proc/net/tcp and tcp6 (state 01), every timeout/10, at least 1 s and at
// most 10 s apart.
func WatchdogScript(timeout time.Duration, halt string) string {
	every := min(max(timeout/10, time.Second), 10*time.Second)
	return fmt.Sprintf(`t=%d; last=$(date +%%s)
while sleep %d; do
  if awk 'FNR > 1 && $4 == "01" && $2 ~ /:0016$/ { f = 1 } END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
    last=$(date +%%s)
  elif [ $(( $(date +%%s) - last )) -ge "$t" ]; then
    echo "scavenger watchdog: no SSH connection for ${t}s: its scavd is gone; ending the instance" >&2
    %s
    exit 0
  fi
done`, int(timeout.Seconds()), int(every.Seconds()), halt)
}

// WatchdogPath is where CloudConfig installs the orphan watchdog.
const WatchdogPath = "/usr/local/sbin/scavenger-watchdog"

// CloudConfig is the cloud-init #cloud-config document an instance of a
// cloud boots with (EC2's user data, GCE's user-data metadata): b's
// authorized key and host key, and, with a positive orphanTimeout, the
// orphan watchdog (WatchdogScript) written to WatchdogPath and started at
// boot; its halt is a shutdown, which the provider turns into the
// instance's end.
func CloudConfig(b Boot, orphanTimeout time.Duration) string {
	var s strings.Builder
	s.WriteString("#cloud-config\nssh_authorized_keys:\n  - " + b.AuthorizedKey + "\nssh_keys:\n  ed25519_private: |\n")
	for line := range strings.Lines(strings.TrimSpace(string(b.HostKey))) {
		s.WriteString("    " + line)
	}
	s.WriteString("\n  ed25519_public: " + b.HostKeyPublic + "\nssh_deletekeys: true\nssh_genkeytypes: []\n")
	if orphanTimeout > 0 {
		s.WriteString("write_files:\n  - path: " + WatchdogPath + "\n    permissions: '0755'\n    content: |\n      #!/bin/sh\n")
		for line := range strings.Lines(WatchdogScript(orphanTimeout, "shutdown -h now")) {
			s.WriteString("      " + strings.TrimRight(line, "\n") + "\n")
		}
		s.WriteString("runcmd:\n  - [sh, -c, 'nohup " + WatchdogPath + " >>/var/log/scavenger-watchdog.log 2>&1 &']\n")
	}
	return s.String()
}
