// Package jobauth is how VCCL's connections prove they belong to one job:
// the job token's derived keys, the challenge-response proofs every
// handshake (rendezvous store, tcp, shm, ft) exchanges, the loopback test
// that decides whether a job may run without a token, and a rate limit for
// the log lines that refused connections would otherwise write without end.
//
// The token itself never travels and is never logged: each side sends a
// fresh random nonce, and each proves it holds the token with an HMAC-SHA256
// over both nonces, its role and what the connection is for (the rank it
// claims, the connection key it asks for), under a key derived from the
// token for that protocol. A recorded handshake cannot be replayed (the
// other side's nonce differs next time) and says nothing about the token
// but what a guess could be checked against offline, so a token should be
// random (vcclrun makes 128 random bits), not a word.
package jobauth

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// Environment variables of the job token, read by bootstrap.FromEnv and by
// collective's options (the opt-out).
const (
	// TokenVar holds the job token.
	TokenVar = "VCCL_JOB_TOKEN"
	// TokenFileVar names a file holding it (a shared filesystem, a
	// Kubernetes secret): the file's first line, surrounding blanks trimmed.
	TokenFileVar = "VCCL_JOB_TOKEN_FILE"
	// InsecureVar=1 lets a job whose store or transport address is not
	// loopback run without a token, on a network every host of which is
	// trusted.
	InsecureVar = "VCCL_INSECURE_NO_TOKEN"
)

// MaxToken bounds a job token's length in bytes.
const MaxToken = 1024

// NonceSize and ProofSize are the sizes of a handshake's nonce and proof.
const (
	NonceSize = 16
	ProofSize = sha256.Size
)

// Purposes of derived keys: one per protocol, so that a proof made for one
// can never pass for another.
const (
	PurposeStore     = "store"
	PurposeTransport = "transport"
	PurposeLive      = "live"
)

// Key derives the key of purpose from token: HMAC-SHA256(token, label).
func Key(token, purpose string) []byte {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte("vccl-go job token v2: " + purpose))
	return m.Sum(nil)
}

// Proof is HMAC-SHA256(key, role, parts...), each part length-prefixed so
// that no two lists of parts encode alike.
func Proof(key []byte, role string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	var n [4]byte
	for _, p := range append([][]byte{[]byte(role)}, parts...) {
		binary.BigEndian.PutUint32(n[:], uint32(len(p)))
		m.Write(n[:])
		m.Write(p)
	}
	return m.Sum(nil)
}

// Equal compares two proofs in constant time.
func Equal(a, b []byte) bool { return len(a) == len(b) && subtle.ConstantTimeCompare(a, b) == 1 }

// Nonce returns NonceSize fresh random bytes.
func Nonce() []byte {
	b := make([]byte, NonceSize)
	rand.Read(b) // never fails (crypto/rand panics rather than return short)
	return b
}

// Bearer is the credential an HTTP client of a rank's live endpoint
// presents (Authorization: Bearer …) when the endpoint asks for one: a
// value derived from the token, so that a leaked bearer opens the
// endpoint's telemetry and nothing else of the job. "" for an empty token.
func Bearer(token string) string {
	if token == "" {
		return ""
	}
	return fmt.Sprintf("%x", Key(token, PurposeLive))
}

// IsLoopback reports whether addr (host:port, a bare host, or a
// comma-separated list of them, as an ft listener's "primary,backup") only
// names this host's loopback: a loopback IP, "localhost", or a Unix socket
// (a path or an abstract "@name"). Other host names are resolved, within
// ctx, and count as loopback only when every address is; an empty host (a
// wildcard listen address) and a name that does not resolve do not.
func IsLoopback(ctx context.Context, addr string) bool {
	for _, a := range strings.Split(addr, ",") {
		if !isLoopback1(ctx, strings.TrimSpace(a)) {
			return false
		}
	}
	return true
}

func isLoopback1(ctx context.Context, addr string) bool {
	if strings.HasPrefix(addr, "@") || strings.HasPrefix(addr, "/") {
		return true // a Unix socket: this host's, whatever its name
	}
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if host == "" {
		return false
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().IsLoopback()
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(ips) == 0 {
		return false
	}
	for _, ip := range ips {
		if !ip.Unmap().IsLoopback() {
			return false
		}
	}
	return true
}

// LogLimiter lets one log line through per interval and counts the ones it
// holds back, so that a flood of refused connections costs a line every
// interval, not one each.
type LogLimiter struct {
	Interval time.Duration // default 10s

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// Allow reports whether a line may be logged now and, if so, how many were
// held back since the last one.
func (l *LogLimiter) Allow() (ok bool, suppressed int) {
	iv := l.Interval
	if iv <= 0 {
		iv = 10 * time.Second
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < iv {
		l.suppressed++
		return false, 0
	}
	l.last = now
	n := l.suppressed
	l.suppressed = 0
	return true, n
}

// Gate caps connections that have not authenticated yet. Slot bounds them
// all: an accept loop takes a slot before it accepts, so past Max the
// connections wait in the kernel's backlog, holding none of our
// descriptors, and a flood delays the job's own connections (by at most
// the handshake timeout) rather than fails them. Host bounds those of one
// remote host that is not this one: strangers elsewhere cannot take every
// slot.
type Gate struct {
	Max, PerHost int

	once   sync.Once
	slots  chan struct{}
	mu     sync.Mutex
	byHost map[string]int
}

// Slot waits for a free slot, or until done is closed (false). Release it
// with Free.
func (g *Gate) Slot(done <-chan struct{}) bool {
	g.once.Do(func() { g.slots = make(chan struct{}, max(g.Max, 1)) })
	// A free slot wins over a closed done: select picks at random among
	// ready cases.
	select {
	case g.slots <- struct{}{}:
		return true
	default:
	}
	select {
	case g.slots <- struct{}{}:
		return true
	case <-done:
		return false
	}
}

// Free releases a slot Slot took.
func (g *Gate) Free() { <-g.slots }

// Host takes a slot of remote's host (an address, host:port) and returns
// its release, or false when that host holds PerHost already. Loopback and
// Unix peers are this host's and not counted.
func (g *Gate) Host(remote string) (release func(), ok bool) {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	if ip, err := netip.ParseAddr(host); g.PerHost <= 0 || err != nil || ip.Unmap().IsLoopback() {
		return func() {}, true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.byHost[host] >= g.PerHost {
		return nil, false
	}
	if g.byHost == nil {
		g.byHost = map[string]int{}
	}
	g.byHost[host]++
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.byHost[host]--; g.byHost[host] <= 0 {
				delete(g.byHost, host)
			}
		})
	}, true
}
