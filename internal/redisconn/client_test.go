package redisconn

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestClientOptions(t *testing.T) {
	tests := []struct {
		name     string
		in       redis.Options
		timeout  time.Duration
		wantDial time.Duration
	}{
		{"relay", redis.Options{Addr: "127.0.0.1:6379"}, DefaultTimeout, 5 * time.Second},
		{"short checks", redis.Options{Addr: "127.0.0.1:6379"}, 3 * time.Second, 5 * time.Second},
		{"dial timeout kept", redis.Options{Addr: "127.0.0.1:6379", DialTimeout: time.Second, MaxRetries: 3}, DefaultTimeout, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			o := ClientOptions(&in, tt.timeout)
			if o != &in {
				t.Errorf("ClientOptions returned a copy, want the options it was given")
			}
			if o.MaxRetries != -1 || !o.ContextTimeoutEnabled || !o.DisableIdentity {
				t.Errorf("MaxRetries %d, ContextTimeoutEnabled %v, DisableIdentity %v; want -1, true, true", o.MaxRetries, o.ContextTimeoutEnabled, o.DisableIdentity)
			}
			if o.ReadTimeout != tt.timeout || o.WriteTimeout != tt.timeout {
				t.Errorf("read/write timeout %s/%s, want %s", o.ReadTimeout, o.WriteTimeout, tt.timeout)
			}
			if o.DialTimeout != tt.wantDial {
				t.Errorf("dial timeout %s, want %s", o.DialTimeout, tt.wantDial)
			}
			if o.Addr != tt.in.Addr {
				t.Errorf("Addr %q, want %q", o.Addr, tt.in.Addr)
			}
		})
	}
}
