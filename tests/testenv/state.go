package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// state is everything this process writes into the data directory.
type state struct {
	dir         string
	certDir     string
	caCert      string
	servingCert string
	servingKey  string
	saKey       string
	saPub       string
	tokens      string
	kubeconfig  string
	adminToken  string
	url         string
}

// Names of the entries this process owns inside the data directory; only
// these are removed on exit, so a user-chosen directory keeps anything else.
var ownedEntries = []string{"etcd", "pki", "tokens.csv", "kubeconfig", "kubeconfig.tmp"}

const lockName = "ccm-testenv.lock"

func prepareDataDir(dir string) (string, bool, error) {
	if dir == "" {
		d, err := os.MkdirTemp("", "ccm-testenv-")
		if err != nil {
			return "", false, fmt.Errorf("creating a temporary data directory: %w", err)
		}
		return d, true, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", false, err
	}
	created := false
	if _, err := os.Stat(abs); errors.Is(err, os.ErrNotExist) {
		created = true
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", false, fmt.Errorf("data directory %s: %w", abs, err)
	}
	probe := filepath.Join(abs, ".ccm-testenv-write-probe")
	if err := os.WriteFile(probe, nil, 0o600); err != nil {
		return "", false, fmt.Errorf("data directory %s is not writable: %w", abs, err)
	}
	_ = os.Remove(probe)
	return abs, created, nil
}

type dirLock struct {
	f    *os.File
	path string
}

// lockDataDir takes an exclusive, non-blocking flock on the data directory so
// that a second instance fails at once instead of corrupting the first's etcd.
// The kernel drops the lock if this process dies, so a stale file is harmless.
func lockDataDir(dir string) (*dirLock, error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data directory %s is in use by another ccm-testenv (pid %s)", dir, string(holder))
		}
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())), 0)
	return &dirLock{f: f, path: path}, nil
}

func (l *dirLock) release(keepDir bool) {
	_ = os.Remove(l.path)
	_ = l.f.Close()
	if !keepDir {
		_ = os.Remove(filepath.Dir(l.path)) // only succeeds when empty
	}
}

func (s *state) remove() {
	for _, name := range ownedEntries {
		_ = os.RemoveAll(filepath.Join(s.dir, name))
	}
}

// newState names the files of a data directory; nothing is read or written.
func newState(dir string) *state {
	pki := filepath.Join(dir, "pki")
	return &state{
		dir:         dir,
		certDir:     pki,
		caCert:      filepath.Join(pki, "ca.crt"),
		servingCert: filepath.Join(pki, "apiserver.crt"),
		servingKey:  filepath.Join(pki, "apiserver.key"),
		saKey:       filepath.Join(pki, "sa.key"),
		saPub:       filepath.Join(pki, "sa.pub"),
		tokens:      filepath.Join(dir, "tokens.csv"),
		kubeconfig:  filepath.Join(dir, "kubeconfig"),
	}
}

// hasState reports whether a data directory holds the credentials of an
// earlier run (one stopped with --keep), which a start then reuses.
func hasState(dir string) bool {
	_, err := os.Stat(newState(dir).caCert)
	return err == nil
}

// previousPort is the apiserver port an earlier run wrote into the admin
// kubeconfig, or 0 if there is none.
func previousPort(dir string) int {
	data, err := os.ReadFile(newState(dir).kubeconfig)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "server: https://127.0.0.1:")
		if !ok {
			continue
		}
		if p, err := strconv.Atoi(rest); err == nil && p > 0 && p <= 65535 {
			return p
		}
	}
	return 0
}

// writeState generates the CA, serving certificate, service-account keys,
// admin token and kubeconfig of a fresh data directory.
func writeState(dir string, apiPort int) (*state, error) {
	s := newState(dir)
	s.url = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	if err := os.MkdirAll(s.certDir, 0o700); err != nil {
		return nil, err
	}
	caPEM, err := writeCAAndServingCert(s)
	if err != nil {
		return nil, fmt.Errorf("generating certificates: %w", err)
	}
	if err := writeServiceAccountKeys(s); err != nil {
		return nil, fmt.Errorf("generating service-account keys: %w", err)
	}
	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	s.adminToken = hex.EncodeToString(tok)
	// token,user,uid,"group1,group2"
	line := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n", s.adminToken, adminUser, adminUser)
	if err := os.WriteFile(s.tokens, []byte(line), 0o600); err != nil {
		return nil, err
	}
	if err := writeKubeconfig(s, caPEM); err != nil {
		return nil, err
	}
	return s, nil
}

const adminUser = "ccm-testenv-admin"

// reuseState takes over the credentials an earlier run left in dir: the same
// CA, serving certificate, service-account keys and admin token, so clients
// and tokens of that run keep working. Only the kubeconfig is rewritten, and
// only its server URL can change (when the port does).
func reuseState(dir string, apiPort int) (*state, error) {
	s := newState(dir)
	s.url = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	fail := func(format string, args ...any) (*state, error) {
		return nil, fmt.Errorf("data directory %s holds an unusable earlier state (%s); remove it or pick another --data-dir", dir, fmt.Sprintf(format, args...))
	}
	for _, f := range []string{s.caCert, s.servingCert, s.servingKey, s.saKey, s.saPub, s.tokens} {
		if _, err := os.Stat(f); err != nil {
			return fail("%v", err)
		}
	}
	caPEM, err := os.ReadFile(s.caCert)
	if err != nil {
		return fail("%v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fail("%s holds no PEM certificate", s.caCert)
	}
	pair, err := tls.LoadX509KeyPair(s.servingCert, s.servingKey)
	if err != nil {
		return fail("serving certificate: %v", err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fail("serving certificate: %v", err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
		return fail("serving certificate: %v", err)
	}
	tokens, err := os.ReadFile(s.tokens)
	if err != nil {
		return fail("%v", err)
	}
	for _, line := range strings.Split(string(tokens), "\n") {
		fields := strings.Split(line, ",")
		if len(fields) >= 2 && fields[1] == adminUser && fields[0] != "" {
			s.adminToken = fields[0]
			break
		}
	}
	if s.adminToken == "" {
		return fail("%s has no token for %s", s.tokens, adminUser)
	}
	if err := writeKubeconfig(s, caPEM); err != nil {
		return nil, err
	}
	return s, nil
}

func writeKubeconfig(s *state, caPEM []byte) error {
	// Embedded CA data: the kubeconfig stays valid if copied elsewhere.
	data := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: ccm-testenv
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: admin
  user:
    token: %s
contexts:
- name: ccm-testenv
  context:
    cluster: ccm-testenv
    user: admin
current-context: ccm-testenv
`, s.url, base64.StdEncoding.EncodeToString(caPEM), s.adminToken)
	tmp := s.kubeconfig + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.kubeconfig)
}

func writeCAAndServingCert(s *state) ([]byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ccm-testenv-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(s.caCert, caPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(s.servingCert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}), 0o600); err != nil {
		return nil, err
	}
	if err := writeECKey(s.servingKey, srvKey); err != nil {
		return nil, err
	}
	return caPEM, nil
}

func writeServiceAccountKeys(s *state) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	if err := writeECKey(s.saKey, key); err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	return os.WriteFile(s.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func writeECKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}
