package capi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"strings"
	"sync"

	"github.com/vccl-go/vccl/collective/bootstrap"
)

// IDBytes is the size of a unique id (NCCL_UNIQUE_ID_BYTES).
const IDBytes = 128

// UniqueID is what every rank of a communicator is given to find the
// others (ncclUniqueId): the address of a rendezvous store that
// GetUniqueID started in its process, and the job token that store and
// every connection of the job require.
//
// Layout: 8 bytes of magic, the address's length (1 byte) and the address
// (at most 63 bytes), then the token (32 bytes of hexadecimal); the rest is
// zero.
type UniqueID [IDBytes]byte

var idMagic = [8]byte{'V', 'C', 'C', 'L', 'i', 'd', '0', '1'}

const (
	idAddr     = 9
	idAddrMax  = 63
	idToken    = idAddr + idAddrMax
	idTokenLen = 32
)

// servers are the stores this process serves for ids it made, by address,
// with how many communicators of this process use each.
var servers struct {
	sync.Mutex
	m map[string]*served
}

type served struct {
	srv  *bootstrap.Server
	refs int
	used bool
}

// GetUniqueID starts a rendezvous store in this process and returns its
// id. The store listens on the address of VCCL_SOCKET_IFNAME (or
// NCCL_SOCKET_IFNAME) for jobs across hosts, else on loopback; it lives
// until the last communicator of this process made from it is destroyed
// (or the process ends, when none is).
func GetUniqueID() (UniqueID, error) {
	var id UniqueID
	host, err := bootstrapHost()
	if err != nil {
		return id, err
	}
	var raw [idTokenLen / 2]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return id, wrap(SystemError, "making a job token", err)
	}
	token := hex.EncodeToString(raw[:])
	srv, err := bootstrap.Serve(context.Background(), net.JoinHostPort(host, "0"), token)
	if err != nil {
		return id, wrap(SystemError, "starting the rendezvous store", err)
	}
	addr := srv.Addr().String()
	if len(addr) > idAddrMax {
		srv.Close()
		return id, errorf(SystemError, "rendezvous address %q is longer than %d bytes", addr, idAddrMax)
	}
	servers.Lock()
	if servers.m == nil {
		servers.m = map[string]*served{}
	}
	servers.m[addr] = &served{srv: srv}
	servers.Unlock()
	copy(id[:], idMagic[:])
	id[8] = byte(len(addr))
	copy(id[idAddr:], addr)
	copy(id[idToken:], token)
	return id, nil
}

// decode returns the store address and token of an id.
func (id UniqueID) decode() (addr, token string, err error) {
	if !bytes.Equal(id[:8], idMagic[:]) {
		return "", "", errorf(InvalidArgument, "not a VCCL unique id (was it made by ncclGetUniqueId of this library?)")
	}
	n := int(id[8])
	if n == 0 || n > idAddrMax {
		return "", "", errorf(InvalidArgument, "corrupt unique id (address of %d bytes)", n)
	}
	addr = string(id[idAddr : idAddr+n])
	token = string(id[idToken : idToken+idTokenLen])
	if _, err := hex.DecodeString(token); err != nil {
		return "", "", errorf(InvalidArgument, "corrupt unique id (token)")
	}
	return addr, token, nil
}

// holdServer notes that a communicator of this process uses the store at
// addr, if this process serves it.
func holdServer(addr string) {
	servers.Lock()
	defer servers.Unlock()
	if s := servers.m[addr]; s != nil {
		s.refs++
		s.used = true
	}
}

// releaseServer undoes holdServer and stops the store once no
// communicator of this process uses it.
func releaseServer(addr string) {
	servers.Lock()
	s := servers.m[addr]
	if s != nil {
		s.refs--
		if s.refs > 0 || !s.used {
			s = nil
		} else {
			delete(servers.m, addr)
		}
	}
	servers.Unlock()
	if s != nil {
		s.srv.Close()
	}
}

// bootstrapHost is the address the store listens on.
func bootstrapHost() (string, error) {
	ifname := processEnv().ifname
	if ifname == "" {
		return "127.0.0.1", nil
	}
	for _, name := range strings.Split(ifname, ",") {
		name = strings.TrimLeft(strings.TrimSpace(name), "=^")
		ifi, err := net.InterfaceByName(name)
		if err != nil {
			continue
		}
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
				return ip.IP.String(), nil
			}
		}
	}
	return "", errorf(SystemError, "no IPv4 address on the interfaces %q (VCCL_SOCKET_IFNAME)", ifname)
}
