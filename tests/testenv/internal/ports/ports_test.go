package ports

import (
	"net"
	"testing"
)

func TestFree(t *testing.T) {
	// A port in use stays in use; one just released is what the kernel
	// may hand out next, which is what avoid is for.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	released, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	avoid := released.Addr().(*net.TCPAddr).Port
	_ = released.Close()

	tests := []struct {
		name  string
		n     int
		avoid []int
	}{
		{"one", 1, nil},
		{"two distinct", 2, nil},
		{"avoiding a released port", 2, []int{avoid}},
		{"avoiding several", 3, []int{avoid, busy.Addr().(*net.TCPAddr).Port}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 200 {
				got, err := Free(tt.n, tt.avoid...)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != tt.n {
					t.Fatalf("got %d ports, want %d", len(got), tt.n)
				}
				seen := map[int]bool{}
				for _, p := range got {
					if seen[p] {
						t.Fatalf("port %d twice in %v", p, got)
					}
					seen[p] = true
					for _, a := range tt.avoid {
						if p == a {
							t.Fatalf("port %d is avoided, got %v", p, got)
						}
					}
					if p == busy.Addr().(*net.TCPAddr).Port {
						t.Fatalf("port %d is in use, got %v", p, got)
					}
				}
			}
		})
	}
}
