// Package api is scavd's API as its clients see it: the wire types of the
// scav.api.* request/reply verbs (RunRequest, Job, Attempt, Decision,
// Allocation, ...), the checks a request passes by itself, how a client
// finds a daemon (the discovery file, the default address and state
// directory) and the Go client, Client, whose methods are the whole API:
// scavctl and any user's Go program import this package and nothing of the
// daemon. It holds no NATS server and exports no NATS handle, and it links
// nothing outside the standard library but the launcher contract's types
// (plugins) and the wire messages (telemetry), themselves on the standard
// library alone (deps_test.go keeps it so). What needs the optimizer, the
// search space of a job and the check that its policy can be built, is
// daemon/control's.
package api
