// Package storecheck checks the JetStream file store of a state directory
// before the embedded NATS server opens it, and repairs what it can.
//
// nats-server trusts its stream index when a block's last record checks
// out, so a few damaged bytes inside a block go unseen until a read meets
// them: then a key-value listing can hang on the record, and a rebuild cuts
// the block at it, losing every record after the damage. Check reads every
// block of every stream, record by record, verifying each record's hash
// (block.go), and with repair rewrites a damaged block without its damaged
// stretches (the records after them are kept), removes the stream's index
// so that the server rebuilds it from the blocks, and moves what it took
// out, and any stream whose metadata cannot be read, aside into
// a directory of the caller's (the daemon names it with the time; it is
// kept, never deleted). A block none of whose
// records checks out is left alone: that is no proof of damage (a block
// format this code does not know), and the server judges it.
//
// What it cannot see: a block cut or emptied at the end of a stream (there
// is nothing after it to tell), which the job store's journal catches
// (telemetry/history).
package storecheck

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/minio/highwayhash"
)

// Report is what Check found, and with repair did.
type Report struct {
	// Store is the directory checked.
	Store string
	// Streams are the streams found, by name.
	Streams []Stream
	// Aside is where damaged files were moved ("" when none were).
	Aside string
	// Took is how long the check took.
	Took time.Duration
}

// Stream is one stream's check.
type Stream struct {
	// Name is the stream's name (a key-value bucket B is stream KV_B).
	Name string
	// Blocks and Records count its blocks and the records that check out.
	Blocks, Records int
	// Lost is how many records the damaged stretches held, as the good
	// records around them tell; with LostMore set a stretch ends the
	// stream, and Lost counts at least one record for it.
	Lost     int
	LostMore bool
	// BadBytes is the size of the damaged stretches.
	BadBytes int64
	// Problem, when set, says why the stream as a whole could not be read
	// (its metadata): the server would not load it, so its records count
	// as lost; with repair it was moved aside whole, and the daemon makes
	// it afresh.
	Problem string
	// Repaired: its damaged blocks were rewritten without the damage.
	Repaired bool
	// Newest is, for a stream Options.Newest names, the newest good
	// record of each subject.
	Newest map[string]Newest
}

// Newest is a subject's newest good record: its sequence and headers.
type Newest struct {
	Seq    uint64
	Header []byte
}

// Options say what Check does besides reading.
type Options struct {
	// Repair repairs what it can, moving what it takes out into Aside.
	Repair bool
	Aside  string
	// Newest names the streams whose newest record of each subject the
	// report keeps (Stream.Newest): a job bucket and its journal, small.
	Newest []string
}

// Damaged reports whether the stream has damage.
func (s Stream) Damaged() bool { return s.Problem != "" || s.BadBytes > 0 }

// Damaged reports whether any stream has damage.
func (r Report) Damaged() bool {
	for _, s := range r.Streams {
		if s.Damaged() {
			return true
		}
	}
	return false
}

// Stream returns the check of the stream named name (zero when none).
func (r Report) Stream(name string) Stream {
	for _, s := range r.Streams {
		if s.Name == name {
			return s
		}
	}
	return Stream{}
}

// Lines says what is wrong, one line per damaged stream (none when all is well).
func (r Report) Lines() []string {
	var out []string
	for _, s := range r.Streams {
		switch {
		case s.Problem != "":
			out = append(out, fmt.Sprintf("stream %s: %s (records in it: %d)", s.Name, s.Problem, s.Records))
		case s.BadBytes > 0:
			lost := fmt.Sprint(s.Lost)
			if s.LostMore {
				lost = "at least " + lost
			}
			done := "left as they are (check only)"
			if s.Repaired {
				done = "the records after the damage were kept"
			}
			out = append(out, fmt.Sprintf("stream %s: %d damaged bytes; records unreadable: %s, read: %d; %s", s.Name, s.BadBytes, lost, s.Records, done))
		}
	}
	if r.Aside != "" && len(out) > 0 {
		out = append(out, "the damaged files are kept in "+r.Aside)
	}
	return out
}

// Check reads the file store of a server whose StoreDir option is
// storeDir (its streams are under storeDir/jetstream/<account>/streams)
// and does what o asks (see the package comment). A store that does not
// exist yet is well.
func Check(storeDir string, o Options) (Report, error) {
	began := time.Now()
	rep := Report{Store: filepath.Join(storeDir, "jetstream")}
	accounts, err := os.ReadDir(rep.Store)
	if errors.Is(err, fs.ErrNotExist) {
		return rep, nil
	}
	if err != nil {
		return rep, fmt.Errorf("check store %s: %w", rep.Store, err)
	}
	for _, acc := range accounts {
		sdir := filepath.Join(rep.Store, acc.Name(), "streams")
		streams, err := os.ReadDir(sdir)
		if !acc.IsDir() || errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return rep, fmt.Errorf("check store: read %s: %w", sdir, err)
		}
		for _, st := range streams {
			if !st.IsDir() || strings.HasPrefix(st.Name(), ".") {
				continue
			}
			c := streamCheck{dir: filepath.Join(sdir, st.Name()), aside: filepath.Join(o.Aside, acc.Name(), st.Name()), repair: o.Repair,
				newest: slices.Contains(o.Newest, st.Name())}
			s, err := c.run(st.Name())
			if err != nil {
				return rep, err
			}
			if s.Damaged() && o.Repair {
				rep.Aside = o.Aside
			}
			rep.Streams = append(rep.Streams, s)
		}
	}
	sort.Slice(rep.Streams, func(a, b int) bool { return rep.Streams[a].Name < rep.Streams[b].Name })
	rep.Took = time.Since(began)
	return rep, nil
}

// streamCheck checks one stream's directory.
type streamCheck struct {
	dir, aside     string
	repair, newest bool
}

func (c streamCheck) run(name string) (Stream, error) {
	s := Stream{Name: name}
	if c.newest {
		s.Newest = map[string]Newest{}
	}
	blocks, err := c.blocks()
	if err != nil {
		return s, err
	}
	s.Blocks = len(blocks)
	var last uint64
	type damage struct {
		index  uint32
		regs   []region
		salved []byte
	}
	var damaged []damage
	var pending *region // a stretch that ended a block: the next block's first record closes it
	for _, index := range blocks {
		buf, err := os.ReadFile(c.blockPath(index))
		if err != nil {
			return s, fmt.Errorf("check store: read block %d of stream %s: %w", index, name, err)
		}
		sc := scan(name, index, buf, last)
		if len(sc.records) == 0 && len(buf) > 0 {
			continue // no proof of damage: the server judges it
		}
		if pending != nil && len(sc.records) > 0 {
			// This block's first record closes the stretch that ended the
			// last one (unless its own first stretch, before it, counts it).
			if len(sc.damaged) == 0 || sc.damaged[0].off > 0 {
				s.Lost += gap(pending.before, sc.records[0].seq)
			}
			pending = nil
		}
		s.Records += len(sc.records)
		for i, reg := range sc.damaged {
			s.BadBytes += int64(reg.size)
			switch {
			case reg.after > 0:
				s.Lost += gap(reg.before, reg.after)
			case i == len(sc.damaged)-1:
				r := reg
				pending = &r
			}
		}
		for _, r := range sc.records {
			if r.tomb {
				continue
			}
			last = max(last, r.seq)
			if c.newest && r.seq >= s.Newest[r.subject].Seq {
				s.Newest[r.subject] = Newest{Seq: r.seq, Header: bytes.Clone(r.header)}
			}
		}
		if len(sc.damaged) > 0 {
			damaged = append(damaged, damage{index: index, regs: sc.damaged, salved: salvage(buf, sc)})
		}
	}
	if pending != nil {
		s.Lost, s.LostMore = s.Lost+1, true
	}
	if problem := c.metaProblem(name); problem != "" {
		s.Problem, s.Lost = problem, s.Lost+s.Records
		if c.repair {
			if err := moveAside(c.dir, c.aside); err != nil {
				return s, err
			}
		}
		return s, nil
	}
	if !c.repair || len(damaged) == 0 {
		return s, nil
	}
	for _, d := range damaged {
		if err := c.rewrite(d.index, d.salved); err != nil {
			return s, err
		}
	}
	// The index would tell the server the records it lost are there: it
	// rebuilds the stream's state from the blocks instead.
	if err := os.Remove(filepath.Join(c.dir, "msgs", "index.db")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s, fmt.Errorf("check store: remove the index of stream %s: %w", name, err)
	}
	s.Repaired = true
	return s, nil
}

// gap is how many sequences lie strictly between before and after.
func gap(before, after uint64) int {
	if after <= before+1 {
		return 0
	}
	return int(after - before - 1)
}

// blocks lists the stream's block indexes in order.
func (c streamCheck) blocks() ([]uint32, error) {
	ents, err := os.ReadDir(filepath.Join(c.dir, "msgs"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check store: %w", err)
	}
	var out []uint32
	for _, e := range ents {
		var index uint32
		if n, err := fmt.Sscanf(e.Name(), "%d.blk", &index); err == nil && n == 1 && e.Type().IsRegular() {
			out = append(out, index)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a] < out[b] })
	return out, nil
}

func (c streamCheck) blockPath(index uint32) string {
	return filepath.Join(c.dir, "msgs", fmt.Sprintf("%d.blk", index))
}

// metaProblem says what is wrong with the stream's metadata: missing,
// unreadable, or not matching its checksum ("" when it is well), as the
// server checks it (a stream that fails is not loaded).
func (c streamCheck) metaProblem(name string) string {
	meta, err := os.ReadFile(filepath.Join(c.dir, "meta.inf"))
	if err != nil {
		return fmt.Sprintf("its metadata cannot be read (%v)", err)
	}
	sum, err := os.ReadFile(filepath.Join(c.dir, "meta.sum"))
	if err != nil {
		return fmt.Sprintf("its metadata checksum cannot be read (%v)", err)
	}
	key := sha256.Sum256([]byte(name))
	h, _ := highwayhash.New64(key[:])
	h.Write(meta)
	if hex.EncodeToString(h.Sum(nil)) != string(sum) {
		return "its metadata does not match its checksum"
	}
	return ""
}

// rewrite replaces block index with salved, its good records, keeping the
// damaged block aside.
func (c streamCheck) rewrite(index uint32, salved []byte) error {
	path := c.blockPath(index)
	kept := filepath.Join(c.aside, "msgs", filepath.Base(path))
	if err := os.MkdirAll(filepath.Dir(kept), 0o700); err != nil {
		return fmt.Errorf("check store: keep damaged block: %w", err)
	}
	if err := copyFile(path, kept); err != nil {
		return err
	}
	tmp := path + ".repair"
	if err := writeSynced(tmp, salved); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("check store: replace block %s: %w", path, err)
	}
	return nil
}

// moveAside moves dir to aside (its parent made as needed).
func moveAside(dir, aside string) error {
	if err := os.MkdirAll(filepath.Dir(aside), 0o700); err != nil {
		return fmt.Errorf("check store: move %s aside: %w", dir, err)
	}
	if err := os.Rename(dir, aside); err != nil {
		return fmt.Errorf("check store: move %s aside: %w", dir, err)
	}
	return nil
}

// copyFile copies src to dst (synced).
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("check store: keep %s: %w", src, err)
	}
	return writeSynced(dst, b)
}

// writeSynced writes b to path (mode 0600) and syncs it.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("check store: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("check store: write %s: %w", path, err)
	}
	return nil
}
