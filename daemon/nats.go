package daemon

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// startNATS runs the embedded nats-server with JetStream, its store under
// stateDir, listening on listen ("host:port"; port 0 picks a free one).
func startNATS(listen, stateDir, name string, log *zap.Logger) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("parse listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("parse listen address %q: port %q is not 0-65535", listen, portStr)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName:             name,
		Host:                   host,
		Port:                   port,
		JetStream:              true,
		StoreDir:               filepath.Join(stateDir, "jetstream"),
		NoSigs:                 true,
		DisableJetStreamBanner: true,
		MaxPayload:             4 << 20,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("configure embedded nats-server on %s: %w", listen, err)
	}
	s.SetLoggerV2(natsLogger{log.Sugar()}, false, false, false)
	go s.Start() // the server owns this goroutine; Shutdown+WaitForShutdown joins it.
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("start embedded nats-server on %s: not ready after 10s (is the address in use by another scavd or nats-server?)", listen)
	}
	return s, nil
}

// connect opens the daemon's own connection: in process to the embedded
// server, or over TCP to an external one. It retries forever on disconnects.
func connect(url string, s *server.Server, name string, log *zap.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(64 << 20),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", zap.Error(err))
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", zap.String("url", c.ConnectedUrl())) }),
	}
	if s != nil {
		opts = append(opts, nats.InProcessServer(s))
		url = s.ClientURL()
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats at %s: %w", url, err)
	}
	return nc, nil
}

// natsLogger routes the embedded server's log into zap.
type natsLogger struct{ s *zap.SugaredLogger }

func (l natsLogger) Noticef(f string, v ...any) { l.s.Debugf(f, v...) }
func (l natsLogger) Warnf(f string, v ...any)   { l.s.Warnf(f, v...) }
func (l natsLogger) Fatalf(f string, v ...any)  { l.s.Errorf(f, v...) }
func (l natsLogger) Errorf(f string, v ...any)  { l.s.Errorf(f, v...) }
func (l natsLogger) Debugf(f string, v ...any)  { l.s.Debugf(f, v...) }
func (l natsLogger) Tracef(f string, v ...any)  { l.s.Debugf(f, v...) }
