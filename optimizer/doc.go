// Package optimizer is the root of Scavenger's decision code. Its subpackages
// each own one idea:
//
//   - trace: reading the measured traces under shared/traces
//   - perf: throughput (step time) models fitted with gonum
//   - gns: the gradient noise scale estimator
//   - efficiency: statistical efficiency and progress
//   - price: the machine-type price catalog
//   - predict: time and cost prediction for candidate configurations
//   - objective: choosing a candidate for the user's objective
//   - policy: search policies that turn telemetry into decisions
//   - observe: the one path from step records to a policy's decisions,
//     live (daemon/control) and simulated (sim)
//   - sim: the trace-driven simulator that scores policies against an oracle
//
// Decision code (perf, gns, efficiency, predict, objective, policy, observe)
// is pure: no clocks, I/O or goroutines.
package optimizer
