package redisconn

import (
	"testing"
)

func TestScannedAs(t *testing.T) {
	scanned := map[string]bool{"10.0.0.5:7001": true, "redis-b:6380": true}
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"10.0.0.5:7001", true},
		{"127.0.0.1:7001", true}, // go-redis dials a loopback address by the origin's host
		{"redis-b:0", true},      // and port 0 (TLS only) by the origin's port
		{"10.0.0.6:7001", false},
		{"127.0.0.1:7002", false},
		{"redis-c:0", false},
	} {
		if got := scannedAs(tt.addr, scanned); got != tt.want {
			t.Errorf("scannedAs(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}
