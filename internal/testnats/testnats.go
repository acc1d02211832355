// Package testnats starts the real nats-server, embedded, with JetStream on
// a random loopback port, for tests; it is shut down when the test ends.
package testnats

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// Server starts a nats-server with JetStream, its store in a temporary
// directory of t; it is shut down when t ends. With users (nkey public
// keys), only they may connect.
func Server(t testing.TB, users ...string) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true}
	for _, u := range users {
		opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: u})
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready after 10s")
	}
	return ns
}

// JetStream starts a server (Server) and connects to it; the connection is
// closed when t ends.
func JetStream(t testing.TB) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	ns := Server(t)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Key makes an nkey user for t: the seed's file (mode 0600) and the public key.
func Key(t testing.TB) (seedFile, pub string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, _ := kp.Seed()
	pub, _ = kp.PublicKey()
	seedFile = filepath.Join(t.TempDir(), "nats.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return seedFile, pub
}

// Connect connects to url as the nkey user whose seed is in seedFile; the
// connection is closed when t ends.
func Connect(t testing.TB, url, seedFile string) *nats.Conn {
	t.Helper()
	opt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}
