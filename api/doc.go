// Package api is scavd's API as its clients see it: the wire types of the
// scav.api.* request/reply verbs (RunRequest, Job, Attempt, Decision,
// Allocation, ...), how a client finds a daemon (the discovery file, the
// default address and state directory) and the Go client, Client, whose
// methods are the whole API: scavctl and any user's Go program import this
// package and nothing of the daemon. It holds no NATS server and exports no
// NATS handle.
package api
