// Package cloudemu is what the cloud API emulations (internal/ec2emu, and
// internal/gceemu) share: the Backend that runs the machines behind their
// emulated instances, what they ask of it, and how they describe their
// instances to their tests. It imports no launcher: the test wiring adapts
// a real machine source (the local cloud, see
// launchers/cloudvm/localcloud/localcloudtest) to Backend.
package cloudemu

import (
	"context"
	"errors"
	"net"
	"time"
)

// Markets and states, with the values EC2 and the providers use.
const (
	OnDemand = "on-demand"
	Spot     = "spot"

	Pending    = "pending"
	Running    = "running"
	Terminated = "terminated"
)

// ErrNoCapacity is a Backend's answer when it cannot launch the machines
// asked for (a full zone): the emulation answers with its cloud's
// capacity error.
var ErrNoCapacity = errors.New("the backend has no capacity")

// Keys are the SSH keys a machine boots with: the authorized_keys line
// that logs in, and its host key (private OpenSSH PEM and public line).
type Keys struct {
	AuthorizedKey string
	HostKey       []byte
	HostKeyPublic string
}

// Launch asks a Backend for Count machines of its Type in its Zone.
type Launch struct {
	Type, Zone, Market string
	Count              int
	// Token makes the launch idempotent: a Token seen before returns the
	// machines of that launch.
	Token       string
	MaxPriceUSD float64
	Tags        map[string]string
	Keys        Keys
}

// Machine is one machine a Backend launched.
type Machine struct {
	ID, Addr string
	Launched time.Time
}

// Backend runs the machines behind the emulated instances.
type Backend interface {
	// Launch starts the machines of l (or, for a Token seen before,
	// returns those it started then); ErrNoCapacity when it cannot.
	Launch(ctx context.Context, l Launch) ([]Machine, error)
	// Terminate ends the machines ids.
	Terminate(ctx context.Context, ids []string) error
	// Ended is when the backend ended machine id (zero while it runs):
	// an interrupted spot machine ends on its own.
	Ended(id string) time.Time
}

// Instance is an emulated instance as an emulation lists it for its tests.
type Instance struct {
	ID, Type, Zone, Market, State, Addr string
	Tags                                map[string]string
	Launched                            time.Time
}

// SSHAnswers reports whether the machine at addr answers on the SSH port
// yet: an emulated instance is pending until it does.
func SSHAnswers(addr string) bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort(addr, "22"), 20*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}
