package daemon

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/scavenger-ml/scavenger/telemetry"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// A small state disk. JetStream reserves each stream's byte limit up front
// and refuses a stream whose limit does not fit in what it may store (by
// default 75% of the space free when it starts, not counting what the store
// already holds). So the limits follow the disk: at start the daemon takes
// the space free plus what its store already holds, gives the streams at
// most half of it (the rest is for the job records, checkpoints under the
// state directory, and everything else on the disk), and scales the default
// limits down to fit, each no lower than 1/32 of its default (50 MiB in
// all, which fits a 200 MB disk) and no lower than what the stream already
// holds (a smaller limit would discard it). store_max_bytes sets the
// streams' total instead. A disk too small even for the floors is refused
// before anything starts, naming the space needed and the keys.

const (
	// storeShare is the share of the space (free plus the store's) the
	// streams' limits take at most.
	storeShare = 0.5
	// storeFloorDiv: a stream's limit is at least its default / storeFloorDiv.
	storeFloorDiv = 32
)

// storeSize is what sizeStore chose.
type storeSize struct {
	// Retention has every byte limit set.
	Retention history.Retention
	// MaxStore is JetStream's limit on all it stores (0: the server's own).
	MaxStore int64
	// Scaled: the default limits were scaled down to fit the disk.
	Scaled bool
}

// streamLimit is one stream's byte limit in a Retention.
type streamLimit struct {
	stream string
	limit  func(*history.Retention) *int64
}

var streamLimits = []streamLimit{
	{telemetry.StepStream, func(r *history.Retention) *int64 { return &r.StepMaxBytes }},
	{telemetry.OutputStream, func(r *history.Retention) *int64 { return &r.LogMaxBytes }},
	{telemetry.NodeStream, func(r *history.Retention) *int64 { return &r.NodeMaxBytes }},
	{telemetry.JournalStream, func(r *history.Retention) *int64 { return &r.JournalMaxBytes }},
}

// sizeStore sizes the streams of a store on a disk with free bytes free
// (negative: unknown, nothing is scaled) whose streams already hold used
// bytes (by stream), for a daemon whose store_max_bytes is set (0: none)
// and whose retention is ret (byte limits set there are kept as they are).
// Pure: a table test holds it.
func sizeStore(free int64, used map[string]int64, set int64, ret history.Retention) (storeSize, error) {
	full := ret.WithDefaults()
	if free < 0 {
		return storeSize{Retention: full}, nil
	}
	avail := free
	for _, n := range used {
		avail += n
	}
	maxStore := avail / 4 * 3
	if set > maxStore {
		return storeSize{}, fmt.Errorf("store_max_bytes %s: the state disk has %s for the store (%s free and %s the store holds, of which JetStream takes at most 3/4); lower store_max_bytes, or free space on the state disk (state_dir)",
			mib(set), mib(maxStore), mib(free), mib(avail-free))
	}
	budget := set
	if budget == 0 {
		budget = int64(float64(avail) * storeShare)
	}
	// The limits the user set stay; the others share what is left.
	var fixed, scalable, floors int64
	for _, s := range streamLimits {
		if *s.limit(&ret) > 0 {
			fixed += *s.limit(&full)
		} else {
			scalable += *s.limit(&full)
			floors += *s.limit(&full) / storeFloorDiv
		}
	}
	out := storeSize{Retention: full, MaxStore: maxStore}
	scale := 1.0
	if scalable > 0 && fixed+scalable > budget {
		scale = max(0, float64(budget-fixed)/float64(scalable))
		out.Scaled = scale < 1
	}
	var total int64
	for _, s := range streamLimits {
		l := s.limit(&out.Retention)
		if *s.limit(&ret) == 0 {
			*l = max(int64(float64(*l)*scale), *l/storeFloorDiv, used[s.stream])
		}
		total += *l
	}
	// What the streams already hold is theirs: it never makes a refusal.
	out.MaxStore = max(out.MaxStore, total+total/3)
	if set == 0 && fixed+floors > budget {
		need := fixed + floors
		return storeSize{}, fmt.Errorf("the state disk is too small: it has %s free (the store holds %s more), and scavd's streams need at least %s, "+
			"with as much again free for checkpoints and job records (%s in all): free space on the state disk, or set state_dir to a larger disk "+
			"(or, with store_max_bytes, give the streams a total that fits)", mib(free), mib(avail-free), mib(need), mib(int64(float64(need)/storeShare)))
	}
	return out, nil
}

// storeUse is how many bytes each stream's files take under the store dir
// (a server's StoreDir option).
func storeUse(storeDir string) map[string]int64 {
	out := map[string]int64{}
	accounts, _ := os.ReadDir(filepath.Join(storeDir, "jetstream"))
	for _, acc := range accounts {
		streams, _ := os.ReadDir(filepath.Join(storeDir, "jetstream", acc.Name(), "streams"))
		for _, st := range streams {
			dir := filepath.Join(storeDir, "jetstream", acc.Name(), "streams", st.Name())
			_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
				if err == nil && e.Type().IsRegular() {
					if info, err := e.Info(); err == nil {
						out[st.Name()] += info.Size()
					}
				}
				return nil
			})
		}
	}
	return out
}
