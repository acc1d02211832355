package plugins

import (
	"path/filepath"
	"strconv"
	"strings"
)

// Names of the worker environment variables of DESIGN.md §3.
const (
	EnvRank           = "RANK"
	EnvWorldSize      = "WORLD_SIZE"
	EnvLocalRank      = "LOCAL_RANK"
	EnvLocalWorldSize = "LOCAL_WORLD_SIZE"
	EnvMasterAddr     = "MASTER_ADDR"
	EnvMasterPort     = "MASTER_PORT"
	EnvJobID          = "SCAV_JOB_ID"
	EnvAttempt        = "SCAV_ATTEMPT"
	EnvSocket         = "SCAV_SOCKET"
	EnvGlobalBatch    = "SCAV_GLOBAL_BATCH"
	EnvLocalBatch     = "SCAV_LOCAL_BATCH"
	EnvLRScale        = "SCAV_LR_SCALE"
	EnvCheckpointDir  = "SCAV_CHECKPOINT_DIR"
	EnvRestore        = "SCAV_RESTORE"
	EnvStartStep      = "SCAV_START_STEP"
	// EnvPreemptSignal names the signal (e.g. "USR1") a scheduler sends the
	// workers before it ends their allocation; a launcher that knows one
	// sets it, and the python client turns that signal into a pre-emption
	// notice to the node daemon, which checkpoints the job and relaunches it.
	EnvPreemptSignal = "SCAV_PREEMPT_SIGNAL"
	// EnvToken is AttemptSpec.Token: what binds a worker's telemetry
	// connection to its attempt.
	EnvToken = "SCAV_TOKEN"
)

// contractKeys are the variables a launcher owns. AttemptSpec.Env may not set
// them (Validate rejects it, WorkerEnv drops them) and InheritEnv strips them
// from the launcher's own environment, so a worker never sees a stale value.
var contractKeys = map[string]bool{
	EnvRank: true, EnvWorldSize: true, EnvLocalRank: true, EnvLocalWorldSize: true,
	EnvMasterAddr: true, EnvMasterPort: true,
	EnvJobID: true, EnvAttempt: true, EnvSocket: true, EnvGlobalBatch: true,
	EnvLocalBatch: true, EnvLRScale: true, EnvCheckpointDir: true, EnvRestore: true, EnvStartStep: true,
	EnvPreemptSignal: true, EnvToken: true,
}

// IsContractEnv reports whether key is a variable of the worker environment
// contract, owned by the launcher.
func IsContractEnv(key string) bool { return contractKeys[key] }

// serviceKeys are what systemd tells the daemon's own process (sd_notify(3),
// sd_watchdog_enabled(3)): a worker must not talk to systemd for the daemon.
var serviceKeys = map[string]bool{"NOTIFY_SOCKET": true, "WATCHDOG_USEC": true, "WATCHDOG_PID": true}

// InheritEnv returns environ (KEY=VALUE pairs, typically os.Environ()) without
// the contract variables and systemd's notification variables, as the base a
// launcher puts WorkerEnv on top of. It strips them so that a daemon started
// inside another distributed job (or a shell that exported RANK) does not
// leak them into ModeSelf workers, nor its service manager's socket.
func InheritEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !contractKeys[k] && !serviceKeys[k] {
			out = append(out, kv)
		}
	}
	return out
}

// WorkerEnv builds the environment a launcher adds for one worker process, on
// top of InheritEnv(os.Environ()).
//
// Precedence: spec.Env overrides the inherited environment (the launcher
// appends WorkerEnv after it, and the last value of a key wins); the contract
// variables override spec.Env, whose entries naming a contract key are
// dropped here (Validate reports them as errors). The contract is owned by
// the launcher so that the optimizer's view of a configuration (workers,
// batch, LR scale) is always what the workers see.
//
// In ModeRanks (after ResolveMode) it sets RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and every SCAV_* variable. In
// ModeSelf the command is itself a launcher (torchrun) that sets the rank
// variables of its children, so only MASTER_ADDR, MASTER_PORT and the SCAV_*
// variables are set and rank, localRank and localWorld are ignored.
//
// SCAV_GLOBAL_BATCH and SCAV_LOCAL_BATCH are unset when the batch is unknown
// (never "0": a script then uses its own default batch), SCAV_LR_SCALE is "1" when spec.Config.LRScale is 0, and SCAV_RESTORE is
// empty for a fresh start; SCAV_START_STEP is the last step already done
// (0 for a fresh start), so the client numbers steps on from it. The result is deterministic: spec.Env in its
// order (last duplicate wins), then the contract variables.
func WorkerEnv(spec AttemptSpec, rank, localRank, localWorld int, masterAddr string, masterPort int) []string {
	out := make([]string, 0, len(spec.Env)+len(contractKeys))
	last := make(map[string]int, len(spec.Env))
	for _, kv := range spec.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || contractKeys[k] {
			continue
		}
		if i, seen := last[k]; seen {
			out[i] = kv
			continue
		}
		last[k] = len(out)
		out = append(out, kv)
	}
	set := func(k, v string) { out = append(out, k+"="+v) }
	if ResolveMode(spec.Mode, spec.Command) != ModeSelf {
		set(EnvRank, strconv.Itoa(rank))
		set(EnvWorldSize, strconv.Itoa(spec.Config.Workers))
		set(EnvLocalRank, strconv.Itoa(localRank))
		set(EnvLocalWorldSize, strconv.Itoa(localWorld))
	}
	set(EnvMasterAddr, masterAddr)
	set(EnvMasterPort, strconv.Itoa(masterPort))
	set(EnvJobID, spec.JobID)
	set(EnvAttempt, strconv.Itoa(spec.Attempt))
	set(EnvSocket, spec.Socket)
	if spec.Config.GlobalBatch > 0 {
		set(EnvGlobalBatch, strconv.Itoa(spec.Config.GlobalBatch))
		set(EnvLocalBatch, strconv.Itoa(spec.Config.LocalBatch()))
	}
	lr := spec.Config.LRScale
	if lr == 0 {
		lr = 1
	}
	set(EnvLRScale, strconv.FormatFloat(lr, 'g', -1, 64))
	set(EnvCheckpointDir, spec.CheckpointDir)
	set(EnvRestore, spec.Restore)
	set(EnvStartStep, strconv.FormatInt(spec.StartStep, 10))
	if spec.Token != "" {
		set(EnvToken, spec.Token)
	}
	if u := spec.User; u != nil {
		set("HOME", u.Home)
		set("USER", u.Name)
		set("LOGNAME", u.Name)
	}
	return out
}

// Command template placeholders (DESIGN.md §3).
const (
	PlaceholderWorkers    = "{workers}"
	PlaceholderBatch      = "{batch_size}"
	PlaceholderLocalBatch = "{local_batch_size}"
)

// ExpandCommand returns a copy of cmd with {workers}, {batch_size} and
// {local_batch_size} replaced, wherever they occur inside an argument, by
// cfg.Workers, cfg.GlobalBatch and cfg.LocalBatch(). Other braces are left alone.
func ExpandCommand(cmd []string, cfg Config) []string {
	r := strings.NewReplacer(
		PlaceholderWorkers, strconv.Itoa(cfg.Workers),
		PlaceholderBatch, strconv.Itoa(cfg.GlobalBatch),
		PlaceholderLocalBatch, strconv.Itoa(cfg.LocalBatch()),
	)
	out := make([]string, len(cmd))
	for i, a := range cmd {
		out[i] = r.Replace(a)
	}
	return out
}

// selfLaunchers are the programs and python modules that start workers themselves.
var selfLaunchers = map[string]bool{
	"torchrun":                 true,
	"torch.distributed.run":    true,
	"torch.distributed.launch": true,
}

// ResolveMode turns ModeAuto (or an empty mode) into ModeSelf or ModeRanks
// for cmd; other modes are returned unchanged. Auto means ModeSelf when the
// basename of cmd[0] is torchrun, torch.distributed.run or
// torch.distributed.launch, or when the arguments run one of those modules
// with python's -m ("-m torch.distributed.run" or "-mtorch.distributed.run");
// ModeRanks otherwise. Wrappers such as a patched torchrun script are not
// recognised and need ModeSelf explicitly.
func ResolveMode(mode LaunchMode, cmd []string) LaunchMode {
	if mode != ModeAuto && mode != "" {
		return mode
	}
	if len(cmd) > 0 && selfLaunchers[filepath.Base(cmd[0])] {
		return ModeSelf
	}
	for i, a := range cmd {
		if a == "-m" && i+1 < len(cmd) && selfLaunchers[cmd[i+1]] {
			return ModeSelf
		}
		if mod, ok := strings.CutPrefix(a, "-m"); ok && selfLaunchers[mod] {
			return ModeSelf
		}
	}
	return ModeRanks
}
