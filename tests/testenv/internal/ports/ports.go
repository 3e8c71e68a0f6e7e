// Package ports finds free loopback TCP ports for the control plane.
package ports

import (
	"fmt"
	"net"
	"slices"
)

// Free returns n distinct free ports on 127.0.0.1, none of them in avoid.
// Every listener stays open until all n are found: a port checked and
// released at once can be handed out again by the next bind to port 0,
// which gave etcd the port just chosen for the apiserver (a CI run failed
// with "bind: address already in use" on a restart).
func Free(n int, avoid ...int) ([]int, error) {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	ports := make([]int, 0, n)
	// Each avoided port is skipped at most once while its listener is
	// held, so this many binds always suffice.
	for tries := 0; len(ports) < n && tries < n+len(avoid); tries++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("cannot listen on 127.0.0.1: %w", err)
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if !slices.Contains(avoid, p) {
			ports = append(ports, p)
		}
	}
	if len(ports) < n {
		return nil, fmt.Errorf("found %d of %d free ports", len(ports), n)
	}
	return ports, nil
}
