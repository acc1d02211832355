package daemon

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"

	"github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v3"

	"github.com/scavenger-ml/scavenger/daemon/apiserver"
)

// CheckMetricsListen says why /metrics may not be served on listen with the
// exporter-toolkit web config webConfig: off loopback it needs one, and it
// must ask for TLS or basic auth (an anonymous scrape is refused).
func CheckMetricsListen(listen, webConfig string) error {
	if webConfig != "" {
		if err := web.Validate(webConfig); err != nil {
			return fmt.Errorf("metrics web config %s: %w", webConfig, err)
		}
	}
	if listen == "" || apiserver.Loopback(listen) {
		return nil
	}
	if webConfig == "" {
		return fmt.Errorf("metrics listen %s: off loopback /metrics needs TLS or basic auth: set metrics_web_config (Prometheus' exporter-toolkit web config)", listen)
	}
	b, err := os.ReadFile(webConfig)
	if err != nil {
		return fmt.Errorf("metrics web config: %w", err)
	}
	var c struct {
		TLS   map[string]any    `yaml:"tls_server_config"`
		Users map[string]string `yaml:"basic_auth_users"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return fmt.Errorf("metrics web config %s: %w", webConfig, err)
	}
	if len(c.TLS) == 0 && len(c.Users) == 0 {
		return fmt.Errorf("metrics listen %s: metrics web config %s sets neither tls_server_config nor basic_auth_users", listen, webConfig)
	}
	return nil
}

// serveWeb serves srv on ln with the web config (none: plain HTTP).
func serveWeb(ln net.Listener, srv *http.Server, webConfig string) error {
	if webConfig == "" {
		return srv.Serve(ln)
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return web.Serve(ln, srv, &web.FlagConfig{WebConfigFile: &webConfig}, quiet)
}
