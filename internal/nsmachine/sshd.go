package nsmachine

import (
	"fmt"
	"strings"
)

// SSHPort is the port a machine's sshd listens on (in its own namespace).
const SSHPort = 22

// SSHD is the configuration of a machine's sshd.
type SSHD struct {
	// Addr is the address it listens on (port SSHPort).
	Addr string
	// HostKey and AuthorizedKeys are files: the host's private key, and
	// the public keys that log in as root.
	HostKey, AuthorizedKeys string
	// PidFile is where it writes its PID ("none": nowhere).
	PidFile string
	// SetEnv are KEY=VALUE pairs every session gets.
	SetEnv []string
}

// Config renders the sshd_config: root logs in with a key only, no PAM,
// AcceptEnv SCAV_*, stream-local forwarding for the telemetry socket, TCP
// forwarding (the launcher reaches the machine's metadata service through
// it), sessions whose client vanished end within about 4 s, and bash run by
// sshd ignores this machine's login files (SHLVL=1).
func (c SSHD) Config() string {
	env := append([]string{"SHLVL=1"}, c.SetEnv...)
	return fmt.Sprintf(`Port %d
ListenAddress %s
HostKey %s
PidFile %s
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AuthorizedKeysFile %s
StrictModes no
AcceptEnv SCAV_*
SetEnv %s
MaxStartups 100:30:200
MaxSessions 50
AllowTcpForwarding yes
AllowStreamLocalForwarding yes
StreamLocalBindUnlink yes
ClientAliveInterval 1
ClientAliveCountMax 3
`, SSHPort, c.Addr, c.HostKey, c.PidFile, c.AuthorizedKeys, strings.Join(env, " "))
}

// SSHDInit is the init command of a machine whose init is sshd with config.
func SSHDInit(config string) []string { return []string{sshdPath, "-D", "-e", "-f", config} }
