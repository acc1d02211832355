// Package control turns a job's observations into its policy's decisions.
//
// A Controller runs one job's policy online. It reads the job's step records
// (Step), builds the policy's observations from them (observer.go), asks
// the policy at each report and hands every new decision to the job's
// runner as a Verdict, which the runner records and acts on. It never writes
// the job record and never calls a launcher: what the launcher knows — the
// machine types offered now and what the job's machines have cost — reaches
// it as observations the runner hands it (SetOffers, SetCharges). The
// policy (optimizer/policy) is the only decider; the controller feeds it and
// turns its decisions into the job record's form.
//
// space.go builds the policy's search space from a job's request: on one
// node, its workers and batch bounds; on a launcher that offers machine
// types (cloudvm), every allowed type priced in the market it would be
// bought in now; Check tells the daemon and scavctl alike whether a
// request's policy can be built.
package control
