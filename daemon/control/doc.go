// Package control turns a job's observations into its policy's decisions;
// space.go builds the policy's search space from a job's request (one
// node's configurations, or a cloud launcher's machine types as it offers
// them now) and checks, for the daemon and for scavctl alike, that a
// request's policy can be built.
package control
