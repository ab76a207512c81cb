package dashboard

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
)

// DefaultAddr is where the dashboard listens unless told otherwise.
const DefaultAddr = "127.0.0.1:7171"

// Listen opens addr for the dashboard. When addr is the default and its
// port is taken (another dashboard), any free loopback port is used
// instead. loopback reports whether only this machine can connect.
func Listen(addr string) (ln net.Listener, loopback bool, err error) {
	if addr == "" {
		addr = DefaultAddr
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, false, fmt.Errorf("--listen %q: want HOST:PORT, e.g. %s", addr, DefaultAddr)
	}
	ln, err = net.Listen("tcp", addr)
	if err != nil && addr == DefaultAddr && errors.Is(err, syscall.EADDRINUSE) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
	}
	if err != nil {
		return nil, false, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return ln, isLoopback(host), nil
}

// isLoopback reports whether a listen host accepts connections from this
// machine only. An empty host, 0.0.0.0 and :: listen everywhere.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// URL is the address to open in a browser for ln.
func URL(ln net.Listener) string {
	a, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		return "http://" + ln.Addr().String() + "/"
	}
	host := a.IP.String()
	switch {
	case a.IP.IsUnspecified():
		host = "127.0.0.1"
	case a.IP.To4() == nil:
		host = "[" + host + "]"
	}
	return fmt.Sprintf("http://%s:%d/", host, a.Port)
}
