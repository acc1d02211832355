package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/scavenger-ml/scavenger/api"
	"github.com/scavenger-ml/scavenger/internal/testdir"
	"github.com/scavenger-ml/scavenger/internal/testnet"
)

// The user-isolation suite: a root scavd serving two unprivileged users.
// Every attack of issue 11 is tried as the wrong user (or as no one) and
// must be refused with a clear error; each one refused is counted, and the
// count is logged for the closing note.

// testUser is an unprivileged user made for a test and removed after it.
type testUser struct {
	name     string
	uid, gid int
}

// addUser makes a system user (no home, no login shell, its own group).
func addUser(t *testing.T, tag string) testUser {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name := "scv" + tag + hex.EncodeToString(b)
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Skipf("SKIP: useradd %s: %v %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v %s", name, err, out)
		}
	})
	id := func(flag string) int {
		out, err := exec.Command("id", flag, name).Output()
		if err != nil {
			t.Fatal(err)
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
		return n
	}
	return testUser{name: name, uid: id("-u"), gid: id("-g")}
}

// as runs argv as u (setpriv: uid, gid, groups), in dir, with a plain
// environment plus env.
func (u testUser) as(t *testing.T, dir string, env []string, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	args := append([]string{"--reuid=" + u.name, "--regid=" + u.name, "--init-groups", "--"}, argv...)
	cmd := exec.Command("setpriv", args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir}, env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	_ = cmd.Run()
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

// sharedDir is a directory every user can enter and write (mode 1777),
// removed after the test.
func sharedDir(t *testing.T) string {
	t.Helper()
	d := testdir.Short(t, "scavsec-")
	if err := os.Chmod(d, 0o1777); err != nil {
		t.Fatal(err)
	}
	return d
}

// refusals counts the attacks a test saw refused.
type refusals struct {
	t    *testing.T
	list []string
}

// expect checks that an attempt failed and said why (every one of want).
func (r *refusals) expect(what string, code int, out string, want ...string) {
	r.t.Helper()
	if code == 0 {
		r.t.Errorf("%s: succeeded; want it refused\n%s", what, out)
		return
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			r.t.Errorf("%s: refused without saying %q:\n%s", what, w, out)
			return
		}
	}
	r.list = append(r.list, what)
}

func TestUsersAreIsolated(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the user-isolation suite runs as root (useradd, setpriv)")
	}
	alice, bob := addUser(t, "a"), addUser(t, "b")
	work := sharedDir(t)
	state := filepath.Join(work, "state") // a root daemon's: 0711, its sockets open to all
	info := startScavd(t, state)
	ctl := func(u testUser, args ...string) (string, int) {
		o, e, code := u.as(t, work, nil, append([]string{scavctlBin, "--api", info.API}, args...)...)
		return o + e, code
	}
	r := &refusals{t: t}

	// Alice's job runs as Alice and keeps running until told.
	aliceRun := exec.Command("setpriv", "--reuid="+alice.name, "--regid="+alice.name, "--init-groups", "--",
		scavctlBin, "--api", info.API, "run", "--name", "alices", "--grace", "2s", "--", "/bin/sh", "-c",
		`echo "uid=$(id -u) gid=$(id -g) home=$HOME"; echo ok > "$SCAV_CHECKPOINT_DIR/ckpt"; while [ ! -e stop ]; do sleep 0.1; done`)
	aliceRun.Dir, aliceRun.Env = work, []string{"PATH=/usr/bin:/bin", "HOME=" + work}
	var aliceOut bytes.Buffer
	aliceRun.Stdout, aliceRun.Stderr = &aliceOut, &aliceOut
	if err := aliceRun.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = os.WriteFile(filepath.Join(work, "stop"), nil, 0o644)
		_ = aliceRun.Wait()
	}()
	job := awaitUserJob(t, state, alice.name)
	ckpt := filepath.Join(job.CheckpointDir, "ckpt")
	for deadline := time.Now().Add(20 * time.Second); !exists(ckpt); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("alice's job wrote no checkpoint:\n%s", aliceOut.String())
		}
	}
	for _, p := range []string{ckpt, job.CheckpointDir} {
		if uid := fileUID(t, p); uid != alice.uid {
			t.Errorf("%s is uid %d's, want alice's (%d)", p, uid, alice.uid)
		}
	}
	if job.Owner == nil || job.Owner.UID != uint32(alice.uid) || job.Owner.User != alice.name {
		t.Errorf("record's owner %+v, want alice (%d)", job.Owner, alice.uid)
	}

	// Bob may not act on it, nor read it.
	for _, args := range [][]string{
		{"stop", job.ID}, {"move", job.ID, "--workers", "1"}, {"logs", job.ID}, {"steps", job.ID},
		{"status", job.ID}, {"report", job.ID}, {"run", "--resume", job.ID},
	} {
		out, code := ctl(bob, args...)
		r.expect("bob: scavctl "+strings.Join(args, " ")+" of alice's job", code, out, "permission denied", alice.name)
	}
	out, _ := ctl(bob, "jobs")
	if strings.Contains(out, job.ID) {
		t.Errorf("bob's jobs list alice's job:\n%s", out)
	}
	out, code := ctl(bob, "jobs", "--all")
	r.expect("bob: scavctl jobs --all", code, out, "only root")

	// The secrets of the daemon are not his to read.
	for _, f := range []string{"nats.nk", "telemetry.key", "scavd.json"} {
		o, e, code := bob.as(t, work, nil, "cat", filepath.Join(state, f))
		r.expect("bob: read "+f, code, o+e, "Permission denied")
	}

	// His job runs as him, not as root; he cannot have one made where he could not.
	out, code = ctl(bob, "run", "--", "/bin/sh", "-c", "echo uid=$(id -u)")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("uid=%d", bob.uid)) {
		t.Errorf("bob's job did not run as bob (exit %d):\n%s", code, out)
	} else {
		r.list = append(r.list, "bob: run a job as root")
	}
	out, code = ctl(bob, "run", "--checkpoint-dir", "/etc/scavpwn", "--", "/bin/true")
	r.expect("bob: checkpoint directory in /etc", code, out, "/etc/scavpwn")
	if exists("/etc/scavpwn") {
		os.RemoveAll("/etc/scavpwn")
		t.Error("the daemon made /etc/scavpwn for bob")
	}

	// Forged telemetry: Bob's worker, bound to his own attempt, writes for
	// Alice's job; a connection without its attempt's token writes too.
	before := ingestDrops(t, info)
	out, code = ctl(bob, "run", "--", pythonBin, "-c", forger(job.ID))
	if code != 0 {
		t.Errorf("bob's forging job failed (exit %d):\n%s", code, out)
	}
	after := ingestDrops(t, info)
	if d := after["forged"] - before["forged"]; d < 2 {
		t.Errorf("forged records counted %d, want 2 (a step and a pre-emption notice)", d)
	} else {
		r.list = append(r.list, "bob: forged step record for alice's job", "bob: forged pre-emption (control) for alice's job")
	}
	if d := after["unbound"] - before["unbound"]; d < 2 {
		t.Errorf("records without a token counted %d, want 2", d)
	} else {
		r.list = append(r.list, "bob: step record without a token", "bob: hello with a stolen-looking token")
	}
	if recs := steps(t, state, job.ID); len(recs) != 0 {
		t.Errorf("alice's job has %d step records; the forged ones got in", len(recs))
	}
	if j := jobRecord(t, state, job.ID); j.State != api.StateRunning || j.Attempt != 1 {
		t.Errorf("alice's job is %s at attempt %d after bob's forgeries", j.State, j.Attempt)
	}

	// NATS answers no one but the daemons: no anonymous client, no stranger's key.
	r.natsRefused(info.NATS)

	// Root sees every user's jobs; Alice's ends when she says.
	out, code = ctl(testUser{name: "root"}, "jobs", "--all")
	if code != 0 || !strings.Contains(out, job.ID) || !strings.Contains(out, bob.name) {
		t.Errorf("root's jobs --all:\n%s", out)
	}
	t.Logf("%d attacks refused:\n  %s", len(r.list), strings.Join(r.list, "\n  "))
}

// natsRefused tries NATS anonymously and with a key the server does not
// know: connecting, then publishing a control message, deleting a key and
// purging a stream, none of which may happen.
func (r *refusals) natsRefused(url string) {
	r.t.Helper()
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	for name, opts := range map[string][]nats.Option{
		"anonymous":      nil,
		"stranger's key": {nats.Nkey(pub, kp.Sign)},
		"guessed user":   {nats.UserInfo("scavd", "scavd")},
	} {
		nc, err := nats.Connect(url, append(opts, nats.MaxReconnects(0), nats.Timeout(3*time.Second))...)
		if err == nil {
			nc.Close()
			r.t.Errorf("NATS %s: connected; want it refused", name)
			continue
		}
		r.expect("NATS "+name+": connect (to publish control, delete job keys, purge streams)", 1, err.Error(), "Authorization Violation")
	}
}

// forger is a worker that binds its connection with its own token, then
// writes a step record and a pre-emption notice for victim, and on a second
// connection writes a step without a hello and a hello with a made-up token.
func forger(victim string) string {
	return fmt.Sprintf(`import json, os, socket, time
e = os.environ
def conn():
    s = socket.socket(socket.AF_UNIX); s.connect(e["SCAV_SOCKET"]); return s
def rec(job, **kw):
    d = {"v": 1, "job": job, "attempt": 1, "rank": 0, "world": 1, "step": 1, "t": time.time(), "dt": 0.1, "samples": 8}
    d.update(kw); return (json.dumps(d) + "\n").encode()
s = conn()
s.sendall(rec(e["SCAV_JOB_ID"], kind="hello", step=0, token=e["SCAV_TOKEN"], attempt=int(e["SCAV_ATTEMPT"])))
s.sendall(rec(%[1]q, step=999999))
s.sendall(rec(%[1]q, kind="preempt", step=0, id="SIGUSR1"))
s2 = conn()
s2.sendall(rec(%[1]q, step=999998))
s2.sendall(rec(%[1]q, kind="hello", step=0, token="0123456789abcdef0123456789abcdef"))
time.sleep(0.5)
`, victim)
}

// awaitUserJob waits for a running job of user's and returns its record.
func awaitUserJob(t *testing.T, state, user string) api.Job {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, e, _ := scavctl(t, state, "jobs", "--all", "-o", "json")
		var all []api.Job
		if err := json.Unmarshal([]byte(out), &all); err != nil {
			t.Fatalf("jobs --all: %v\n%s%s", err, out, e)
		}
		for _, j := range all {
			if j.Owner != nil && j.Owner.User == user && j.State == api.StateRunning {
				return j
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no running job of %s", user)
		}
	}
}

// ingestDrops reads the daemon's telemetry drop counters.
func ingestDrops(t *testing.T, info api.Info) map[string]int64 {
	t.Helper()
	c, err := api.Dial(t.Context(), info.API, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st, err := c.Stats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st.Ingest.Dropped
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// fileUID is the owner of path.
func fileUID(t *testing.T, path string) int {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(st.Sys().(*syscall.Stat_t).Uid)
}

// TestRemoteAPINeedsTLSAndToken: off loopback the API is served only with
// TLS and tokens; scavctl on another (namespace) host reaches it with its
// token and the CA, and nothing without a valid token gets an answer.
func TestRemoteAPINeedsTLSAndToken(t *testing.T) {
	tn := testnet.New(t, 1)
	dir := sharedDir(t)
	ca, cert, key := selfSigned(t, dir, tn.BridgeAddr)
	token := hex.EncodeToString([]byte("remote-token-0123456789"))
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# token user\n"+token+" root\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Without TLS, off loopback, scavd refuses to start and says why.
	for _, args := range [][]string{
		{"--api-listen", tn.BridgeAddr + ":0", "--api-tokens", tokens},
		{"--listen", tn.BridgeAddr + ":0"},
		{"--metrics-listen", tn.BridgeAddr + ":0"},
		{"--api-listen", "127.0.0.1:0"},
	} {
		out, err := exec.Command(scavdBinary(t), append([]string{"--state-dir", filepath.Join(dir, "x"), "--check-config"}, args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "TLS") && !strings.Contains(string(out), "api_tokens") {
			t.Errorf("scavd --check-config %v: %v\n%s; want it refused for want of TLS or tokens", args, err, out)
		}
	}
	info := startScavd(t, filepath.Join(dir, "state"), "--api-listen", tn.BridgeAddr+":0",
		"--api-tls-cert", cert, "--api-tls-key", key, "--api-tokens", tokens)
	if info.APIAddr == "" {
		t.Fatal("no TCP API address in the discovery file")
	}
	url := "https://" + info.APIAddr
	remote := func(args ...string) (string, int) {
		cmd := exec.Command("ip", append([]string{"netns", "exec", tn.Hosts[0].NS, scavctlBin, "--api", url, "--api-ca", ca}, args...)...)
		out, _ := cmd.CombinedOutput()
		return string(out), cmd.ProcessState.ExitCode()
	}
	if out, code := remote("--token-file", tokenFile, "jobs"); code != 0 || !strings.Contains(out, "ID") {
		t.Fatalf("scavctl jobs from %s with the token: exit %d\n%s", tn.Hosts[0].Name, code, out)
	}
	r := &refusals{t: t}
	out, code := remote("jobs")
	r.expect("remote scavctl without a token", code, out, "unauthenticated")
	bad := filepath.Join(dir, "bad")
	_ = os.WriteFile(bad, []byte("not-the-token-at-all-0123\n"), 0o600)
	out, code = remote("--token-file", bad, "jobs")
	r.expect("remote scavctl with a wrong token", code, out, "unknown token")
	cmd := exec.Command("ip", "netns", "exec", tn.Hosts[0].NS, scavctlBin, "--api", url, "--token-file", tokenFile, "jobs")
	o, _ := cmd.CombinedOutput()
	r.expect("remote scavctl that does not verify the daemon's certificate", cmd.ProcessState.ExitCode(), string(o), "certificate")
	t.Logf("%d attempts refused: %s", len(r.list), strings.Join(r.list, "; "))
}

// selfSigned writes a CA and a certificate for ips (server and client, so
// that routes can present it both ways), signed by it, into dir and returns
// their files.
func selfSigned(t *testing.T, dir string, ips ...string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "scavenger test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "scavd"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	for _, ip := range ips {
		srvTmpl.IPAddresses = append(srvTmpl.IPAddresses, net.ParseIP(ip))
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caTmpl, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalECPrivateKey(srvKey)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("cert.pem", "CERTIFICATE", srvDER), write("key.pem", "EC PRIVATE KEY", keyDER)
}

// TestAUsersDaemonRunsOnlyTheirJobs: a scavd a user runs for themselves
// answers no other user (the kernel refuses the socket), and runs no job of
// anyone else's, root's included.
func TestAUsersDaemonRunsOnlyTheirJobs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIP: the user-isolation suite runs as root (useradd, setpriv)")
	}
	alice, bob := addUser(t, "a"), addUser(t, "b")
	work := sharedDir(t)
	state := filepath.Join(work, "alice-state")
	d := exec.Command("setpriv", "--reuid="+alice.name, "--regid="+alice.name, "--init-groups", "--",
		scavdBinary(t), "--state-dir", state, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--node-sample-every", "0")
	d.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + work}
	dlog := startDaemon(t, d, "alice's scavd")
	sock := filepath.Join(state, api.SocketName)
	for deadline := time.Now().Add(30 * time.Second); !exists(sock); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("alice's scavd made no api socket:\n%s", dlog.String())
		}
	}
	r := &refusals{t: t}
	o, e, code := bob.as(t, work, nil, scavctlBin, "--api", sock, "jobs")
	r.expect("bob: reach alice's own scavd", code, o+e, "permission denied")
	o, e, code = scavctlEnv(t, state, nil, "--api", sock, "run", "--", "/bin/true")
	r.expect("root: run a job through alice's own scavd", code, o+e, "runs only "+alice.name+"'s jobs")
	if o, e, code = alice.as(t, work, nil, scavctlBin, "--api", sock, "run", "--", "/bin/sh", "-c", "id -u"); code != 0 || !strings.Contains(o+e, strconv.Itoa(alice.uid)) {
		t.Errorf("alice's job through her own scavd: exit %d\n%s%s", code, o, e)
	}
	t.Logf("%d attempts refused: %s", len(r.list), strings.Join(r.list, "; "))
}
