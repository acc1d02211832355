package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"go.uber.org/zap"

	"github.com/scavenger-ml/scavenger/daemon/apiserver"
	"github.com/scavenger-ml/scavenger/daemon/ingest"
	"github.com/scavenger-ml/scavenger/daemon/models"
	"github.com/scavenger-ml/scavenger/internal/secret"
	"github.com/scavenger-ml/scavenger/telemetry/history"
)

// The NATS server never answers an anonymous client, on loopback too: the
// daemons authenticate with an nkey (a user's seed, in a 0600 file; its
// public key is the server's one user). Only daemons hold it: users reach
// scavd through its API (apiserver), never NATS, so no user can publish a
// control message, a step record or a key-value write, or purge a stream.

// natsKey is the daemon's NATS identity.
type natsKey struct {
	kp  nkeys.KeyPair
	pub string
}

// loadNATSKey reads the nkey seed at path, or makes one there (mode 0600)
// when there is none and make is set. A seed others can read is refused.
func loadNATSKey(path string, make bool) (natsKey, error) {
	var mk func() ([]byte, error)
	if make {
		mk = func() ([]byte, error) {
			kp, err := nkeys.CreateUser()
			if err != nil {
				return nil, err
			}
			seed, _ := kp.Seed()
			return append(seed, '\n'), nil
		}
	}
	b, err := secret.Read(path, "nats key", "act as the daemon", mk)
	if err != nil {
		return natsKey{}, err
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(b))
	if err != nil {
		return natsKey{}, fmt.Errorf("nats key %s: not an nkey seed: %w", path, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return natsKey{}, fmt.Errorf("nats key %s: %w", path, err)
	}
	return natsKey{kp: kp, pub: pub}, nil
}

// Cluster joins the embedded server to the other nodes' servers: one NATS
// cluster whose JetStream holds the streams and buckets of every node (with
// Retention.Replicas copies). Routes authenticate with a password derived
// from the daemons' shared NATS key, and off loopback run only over TLS,
// verified both ways with CA.
type Cluster struct {
	// Name is the cluster's name (the same on every node).
	Name string
	// Listen is this node's route address ("host:port").
	Listen string
	// Routes are the other nodes' route URLs (nats-route://host:port).
	Routes []string
	// TLSCert, TLSKey and TLSCA secure the routes.
	TLSCert, TLSKey, TLSCA string
}

// clusterOpts are the server's cluster options for c.
func clusterOpts(c Cluster, key natsKey) (server.ClusterOpts, []*url.URL, error) {
	var none server.ClusterOpts
	host, portStr, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return none, nil, fmt.Errorf("cluster listen %q: %w", c.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return none, nil, fmt.Errorf("cluster listen %q: port %q", c.Listen, portStr)
	}
	seed, _ := key.kp.Seed()
	sum := sha256.Sum256(append([]byte("scavenger route\x00"), seed...))
	opts := server.ClusterOpts{Name: c.Name, Host: host, Port: port, Username: "scavd-route", Password: hex.EncodeToString(sum[:])}
	if c.TLSCert != "" {
		cfg, err := mutualTLS(c.TLSCert, c.TLSKey, c.TLSCA)
		if err != nil {
			return none, nil, fmt.Errorf("cluster: %w", err)
		}
		opts.TLSConfig, opts.TLSTimeout = cfg, 5
	} else if !apiserver.Loopback(c.Listen) {
		return none, nil, fmt.Errorf("cluster listen %s: off loopback routes run only over TLS: set cluster_tls_cert, cluster_tls_key and cluster_tls_ca", c.Listen)
	}
	var routes []*url.URL
	for _, r := range c.Routes {
		u, err := url.Parse(r)
		if err != nil || u.Host == "" {
			return none, nil, fmt.Errorf("cluster route %q: want nats-route://host:port", r)
		}
		u.User = url.UserPassword(opts.Username, opts.Password)
		routes = append(routes, u)
	}
	return opts, routes, nil
}

// mutualTLS is a TLS configuration that presents cert and verifies the peer
// (either side) against ca.
func mutualTLS(cert, key, ca string) (*tls.Config, error) {
	c, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate: %w", err)
	}
	pool, err := certPool(ca, "CA")
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{c}, RootCAs: pool, ClientCAs: pool,
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12}, nil
}

// certPool reads the PEM certificates of file (what names it in errors).
func certPool(file, what string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s holds no PEM certificate", what, file)
	}
	return pool, nil
}

// startNATS runs the embedded nats-server with JetStream, its store under
// stateDir (at most maxStore bytes; 0: the server's default), listening on
// listen ("host:port"; port 0 picks a free one) for clients that present
// key, with TLS when tlsCfg is set (required off loopback), in cluster when
// it names one; note reads its warnings and errors.
func startNATS(listen, stateDir, name string, key natsKey, tlsCfg *tls.Config, cluster Cluster, maxStore int64, note func(string), log *zap.Logger) (*server.Server, error) {
	host, portStr, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("parse listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("parse listen address %q: port %q is not 0-65535", listen, portStr)
	}
	if tlsCfg == nil && !apiserver.Loopback(listen) {
		return nil, fmt.Errorf("listen %s: off loopback NATS needs TLS: set nats_tls_cert and nats_tls_key", listen)
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
		JetStreamMaxStore:      maxStore,
		NoSigs:                 true,
		DisableJetStreamBanner: true,
		MaxPayload:             4 << 20,
		Nkeys:                  []*server.NkeyUser{{Nkey: key.pub}},
		TLSConfig:              tlsCfg,
		TLS:                    tlsCfg != nil,
		AllowNonTLS:            false,
	}
	if cluster.Listen != "" {
		if opts.Cluster, opts.Routes, err = clusterOpts(cluster, key); err != nil {
			return nil, err
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("configure embedded nats-server on %s: %w", listen, err)
	}
	s.SetLoggerV2(natsLogger{s: log.Sugar(), note: note}, false, false, false)
	go s.Start() // the server owns this goroutine; Shutdown+WaitForShutdown joins it.
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		return nil, fmt.Errorf("start embedded nats-server on %s: not ready after 10s (is the address in use by another scavd or nats-server?)", listen)
	}
	return s, nil
}

// serverTLS is the TLS configuration of a listener with cert and key
// (nil when neither is set).
func serverTLS(what, cert, key string) (*tls.Config, error) {
	if cert == "" && key == "" {
		return nil, nil
	}
	c, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("%s: load TLS certificate: %w", what, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{c}, MinVersion: tls.VersionTLS12}, nil
}

// connect opens the daemon's own connection: in process to the embedded
// server, or over TCP to an external one (its certificate verified with the
// CA file caFile, when set), authenticated with key. It retries forever on
// disconnects.
func connect(url string, s *server.Server, name string, key natsKey, caFile string, log *zap.Logger) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(64 << 20),
		nats.Nkey(key.pub, key.kp.Sign),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", zap.Error(err))
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", zap.String("url", c.ConnectedUrl())) }),
		// Without a handler nats.go prints its asynchronous errors to
		// stderr. A slow consumer is mostly a live stream whose reader fell
		// behind and skips messages by design (apiserver's live).
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			if errors.Is(err, nats.ErrSlowConsumer) {
				log.Info("a subscriber fell behind: messages skipped", zap.String("subject", subj))
				return
			}
			log.Warn("nats", zap.String("subject", subj), zap.Error(err))
		}),
	}
	if caFile != "" {
		pool, err := certPool(caFile, "nats CA")
		if err != nil {
			return nil, err
		}
		opts = append(opts, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
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

// natsLogger routes the embedded server's log into zap; note, when set,
// reads its warnings and errors too (the state disk's watch).
type natsLogger struct {
	s    *zap.SugaredLogger
	note func(line string)
}

func (l natsLogger) Noticef(f string, v ...any) { l.s.Debugf(f, v...) }
func (l natsLogger) Warnf(f string, v ...any)   { l.s.Warnf(f, v...); l.noted(f, v) }
func (l natsLogger) Fatalf(f string, v ...any)  { l.s.Errorf(f, v...); l.noted(f, v) }
func (l natsLogger) Errorf(f string, v ...any)  { l.s.Errorf(f, v...); l.noted(f, v) }

func (l natsLogger) Debugf(f string, v ...any) { l.s.Debugf(f, v...) }
func (l natsLogger) Tracef(f string, v ...any) { l.s.Debugf(f, v...) }

// noted hands a warning or error line to note.
func (l natsLogger) noted(f string, v []any) {
	if l.note != nil {
		l.note(fmt.Sprintf(f, v...))
	}
}

// startNATS brings up the embedded server (or joins an external one), the
// daemon's authenticated connection and the JetStream store.
func (d *Daemon) startNATS(ctx context.Context) error {
	cfg, log := d.cfg, d.log
	keyFile := cfg.NATSKey
	if keyFile == "" {
		keyFile = filepath.Join(cfg.StateDir, "nats.nk")
	}
	key, err := loadNATSKey(keyFile, cfg.NATSKey == "")
	if err != nil {
		return err
	}
	if cfg.NATSURL == "" {
		for _, l := range [][2]string{{"nats listen", cfg.Listen}, {"cluster listen", cfg.Cluster.Listen}, {"api listen", cfg.APIListen}} {
			if err := checkPort(l[0], l[1]); err != nil {
				return err
			}
		}
		tlsCfg, err := serverTLS("nats", cfg.NATSTLSCert, cfg.NATSTLSKey)
		if err != nil {
			return err
		}
		if !cfg.asBefore {
			rep, err := checkStore(cfg.StateDir, true, time.Now())
			if err != nil {
				return err
			}
			d.health.check = rep
		}
		free, _ := space(cfg.StateDir)
		size, err := sizeStore(free, storeUse(filepath.Join(cfg.StateDir, "jetstream")), cfg.StoreMaxBytes, cfg.Retention)
		if err != nil {
			return err
		}
		if d.retention = size.Retention; size.Scaled {
			r := size.Retention
			log.Warn("the state disk is small: the streams keep less history", zap.String("free", mib(free)), zap.String("steps", mib(r.StepMaxBytes)),
				zap.String("output", mib(r.LogMaxBytes)), zap.String("node", mib(r.NodeMaxBytes)), zap.String("journal", mib(r.JournalMaxBytes)))
		}
		d.disk = newDiskWatch(cfg.StateDir, log.Named("disk"))
		if d.ns, err = startNATS(cfg.Listen, cfg.StateDir, "scavd-"+cfg.Node, key, tlsCfg, cfg.Cluster, size.MaxStore, d.disk.noteLog, log.Named("nats")); err != nil {
			return err
		}
		d.disk.ns = d.ns
	}
	if d.nc, err = connect(cfg.NATSURL, d.ns, "scavd "+cfg.Node, key, cfg.NATSTLSCA, log.Named("nats")); err != nil {
		return err
	}
	js, err := jetstream.New(d.nc, jetstream.WithPublishAsyncTimeout(ingest.PublishTimeout))
	if err != nil {
		return fmt.Errorf("open jetstream: %w", err)
	}
	if d.ns == nil {
		d.retention = cfg.Retention // an external server's disk is its own
	}
	if d.store, err = openStore(ctx, js, d.retention, cfg.Cluster.Listen != "", log); err != nil {
		return err
	}
	d.models = models.New(d.store.Models)
	if !cfg.asBefore {
		d.health.settleStore(ctx, d.store, log.Named("store"))
	}
	return nil
}

// clusterWait bounds how long a clustered daemon waits for JetStream's
// meta leader and enough peers to make the streams and buckets.
const clusterWait = 2 * time.Minute

// openStore makes the streams and buckets; in a cluster it tries again
// while JetStream is still forming (no meta leader yet, too few peers).
func openStore(ctx context.Context, js jetstream.JetStream, ret history.Retention, clustered bool, log *zap.Logger) (*history.Store, error) {
	deadline := time.Now().Add(clusterWait)
	for {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := history.OpenStore(octx, js, ret)
		cancel()
		if err == nil || !clustered || time.Now().After(deadline) || ctx.Err() != nil {
			return st, err
		}
		log.Info("waiting for the NATS cluster's JetStream", zap.Error(err))
		time.Sleep(500 * time.Millisecond)
	}
}
