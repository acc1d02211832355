package localcloud

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// InterruptVia asks the local cloud that serves the admin socket at sock
// (another process's; see Cloud.AdminSocket) to interrupt instance id with
// notice before its termination.
func InterruptVia(ctx context.Context, sock, id string, notice time.Duration) error {
	body, _ := json.Marshal(interruptRequest{Instance: id, Notice: notice.String()})
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
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
