// Package nsmachine makes machines out of Linux namespaces on this host: a
// bridge with a private /24 (Bridge), and on it machines (Machine), each a
// network namespace with its own address, reached from this (the root)
// namespace over a veth pair.
//
// An isolated machine (Spec.Isolate) is what launchers/cloudvm's local
// provider calls an instance: besides its network namespace it has its own
// UTS (hostname), PID, mount and IPC namespaces, a private tmpfs as its
// local disk (at /mnt), a private /dev/shm, an /etc/hosts in which its
// name resolves to its address, and cgroup-v1 limits that
// make its type: a CPU quota (cpu.cfs_quota_us) and a memory limit. Its
// init (PID 1 in its PID namespace) is the command of Spec.Init, sshd for an
// instance; killing it ends every process of the machine at once, and the
// freezer cgroup catches anything that might escape. The host's other
// files are shared, as with a network file system.
//
// A machine that is not isolated only has its network and UTS namespaces
// (the hosts of internal/testnet, whose tests look at their processes).
//
// It is not a test fixture: the local cloud (launchers/cloudvm/localcloud,
// the local test and development cloud linked into scavd) makes its
// instances with it, and the test fixture internal/testnet builds its hosts
// on it.
//
// Everything here needs root, iproute2 and cgroup v1 controllers mounted at
// /sys/fs/cgroup/{cpu,memory,freezer}; Check says what is missing.
//
// Names: a bridge name and a veth name are network interface names (at most
// 15 bytes); a namespace name is a file name under /run/netns. The caller
// chooses them, with a random part, so that several users of this package
// (test packages running at the same time, two scavd) do not collide; the
// subnet is chosen among those no route of this machine overlaps.
package nsmachine
