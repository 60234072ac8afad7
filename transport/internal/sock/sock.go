// Package sock holds what the stream-socket backends, transport/tcp and
// transport/ft, share below their protocols: choosing the local address
// from a named interface, dialling from it, and the codec of the first 16
// bytes of a frame header (magic, version, type, flags and two fields) that
// both wire formats start with.
// The socket options of a connection are tcp's (tcp.SetupConn), since they
// follow its VCCL_TCP_* settings.
package sock

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// ListenAddr returns the address to listen on: port 0 of the named
// interface's address, or of 127.0.0.1 when ifname is "".
func ListenAddr(ifname string) (string, error) {
	if ifname == "" {
		return "127.0.0.1:0", nil
	}
	ip, err := InterfaceAddr(ifname, 0)
	if err != nil {
		return "", err
	}
	return netip.AddrPortFrom(ip, 0).String(), nil
}

// Dial connects to addr; with ifname named, from that interface's address
// of the family addr resolves to.
func Dial(ctx context.Context, ifname, addr string) (*net.TCPConn, error) {
	var d net.Dialer
	target := addr
	if ifname != "" {
		// Resolve first, so the local address is of the family dialled.
		remote, err := Resolve(ctx, addr)
		if err != nil {
			return nil, err
		}
		fam := 4
		if remote.Addr().Is6() {
			fam = 6
		}
		ip, err := InterfaceAddr(ifname, fam)
		if err != nil {
			return nil, err
		}
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(ip, 0))
		target = remote.String()
	}
	c, err := d.DialContext(ctx, "tcp", target)
	if err != nil {
		if d.LocalAddr != nil {
			return nil, fmt.Errorf("dial %s from %s (interface %s): %w", addr, d.LocalAddr, ifname, err)
		}
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	return c.(*net.TCPConn), nil
}

// Resolve returns the IP address and port addr (host:port) stands for.
func Resolve(ctx context.Context, addr string) (netip.AddrPort, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad address %q: %w", addr, err)
	}
	pn, err := net.DefaultResolver.LookupPort(ctx, "tcp", port)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("bad port in %q: %w", addr, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		ips, lerr := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if lerr != nil {
			return netip.AddrPort{}, fmt.Errorf("resolve %q: %w", host, lerr)
		}
		if len(ips) == 0 {
			return netip.AddrPort{}, fmt.Errorf("resolve %q: no address", host)
		}
		ip = ips[0]
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(pn)), nil
}

// InterfaceAddr returns an address of the named interface: of family fam
// (4 or 6), or for fam 0 the first IPv4 address, else the first IPv6 one.
// Global IPv6 addresses are preferred to link-local ones, which carry the
// interface as their zone.
func InterfaceAddr(name string, fam int) (netip.Addr, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("interface %q: %w", name, err)
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return netip.Addr{}, fmt.Errorf("addresses of interface %q: %w", name, err)
	}
	var v4, v6, v6ll netip.Addr
	for _, a := range addrs {
		pfx, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := pfx.Addr().Unmap()
		switch {
		case ip.Is4():
			if !v4.IsValid() {
				v4 = ip
			}
		case ip.IsLinkLocalUnicast():
			if !v6ll.IsValid() {
				v6ll = ip.WithZone(name)
			}
		default:
			if !v6.IsValid() {
				v6 = ip
			}
		}
	}
	if !v6.IsValid() {
		v6 = v6ll
	}
	switch {
	case fam == 4 && v4.IsValid():
		return v4, nil
	case fam == 6 && v6.IsValid():
		return v6, nil
	case fam == 0 && v4.IsValid():
		return v4, nil
	case fam == 0 && v6.IsValid():
		return v6, nil
	}
	what := "no IP address"
	if fam != 0 {
		what = fmt.Sprintf("no IPv%d address", fam)
	}
	return netip.Addr{}, fmt.Errorf("interface %q has %s (addresses: %v)", name, what, addrs)
}
