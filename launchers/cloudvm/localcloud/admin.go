package localcloud

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/scavenger-ml/scavenger/launchers/cloudvm/provider"
)

// InterruptVia asks the local cloud that serves the admin socket at sock
// (another process's; see Cloud.AdminSocket) to interrupt instance id with
// notice before its termination.
func InterruptVia(ctx context.Context, sock, id string, notice time.Duration) error {
	body, _ := json.Marshal(interruptRequest{Instance: id, Notice: notice.String()})
	hc := unixClient(sock)
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localcloud/interrupt", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("interrupt %s: %w", id, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("interrupt %s through %s: %w", id, sock, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("interrupt %s: %s: %s", id, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// Record is what the cloud knows of an instance: its description, when it
// was interrupted and when it ended (nil while it runs). Launched to Ended
// is what the cloud bills.
type Record struct {
	provider.Instance
	Interrupt *time.Time `json:"interrupt,omitempty"`
	Ended     *time.Time `json:"ended,omitempty"`
	// Up says whether its machine's init runs now: false once it has
	// ended, and for one that ended itself (its watchdog) while no cloud
	// was open to notice.
	Up bool `json:"up"`
}

// record is in's Record.
func (in *instance) record() Record {
	return Record{Instance: in.Instance, Interrupt: in.Interrupt, Ended: in.Ended, Up: in.Machine != nil && in.Machine.Alive()}
}

// Records lists every instance the cloud has launched, terminated ones
// included, oldest first.
func (c *Cloud) Records() []Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Record, 0, len(c.insts))
	for _, in := range c.insts {
		out = append(out, in.record())
	}
	sortRecords(out)
	return out
}

func sortRecords(rs []Record) {
	slices.SortFunc(rs, func(a, b Record) int {
		if c := a.Launched.Compare(b.Launched); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// RecordsVia asks the cloud that serves the admin socket at sock for its records.
func RecordsVia(ctx context.Context, sock string) ([]Record, error) {
	hc := unixClient(sock)
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localcloud/instances", nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("list instances through %s: %w", sock, err)
	}
	defer resp.Body.Close()
	var rs []Record
	if err := json.NewDecoder(resp.Body).Decode(&rs); err != nil {
		return nil, fmt.Errorf("list instances through %s: %w", sock, err)
	}
	return rs, nil
}

// ReadRecords reads the instance records of the cloud in dir from its
// files, without opening it (its owner may be running, or dead).
func ReadRecords(dir string) ([]Record, error) {
	ents, err := os.ReadDir(filepath.Join(dir, "instances"))
	if err != nil {
		return nil, fmt.Errorf("read instance records: %w", err)
	}
	var out []Record
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, "instances", e.Name(), "state.json"))
		if err != nil {
			continue
		}
		var in instance
		if err := json.Unmarshal(b, &in); err != nil {
			return nil, fmt.Errorf("read instance record %s: %w", e.Name(), err)
		}
		out = append(out, in.record())
	}
	sortRecords(out)
	return out, nil
}

func unixClient(sock string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
}
