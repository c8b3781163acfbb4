package redisconn

import (
	"context"
	"errors"
	"net"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	outbox "github.com/binlog-outbox/binlog-outbox"
)

func TestParseTarget(t *testing.T) {
	tests := []struct {
		name, url, master string
		// wantMaster "" wants one server at wantAddrs[0].
		wantMaster string
		wantAddrs  []string
		wantDB     int
		wantUser   string
		wantPass   string
		wantTLS    bool
	}{
		{"one server", "redis://u:p@127.0.0.1:6379/3", "", "", []string{"127.0.0.1:6379"}, 3, "u", "p", false},
		{"one server over TLS", "rediss://cache.example:6380/0", "", "", []string{"cache.example:6380"}, 0, "", "", true},
		{"sentinels", "redis+sentinel://relay:pw@10.0.0.1:26379,10.0.0.2:26380,10.0.0.3/mymaster/2", "",
			"mymaster", []string{"10.0.0.1:26379", "10.0.0.2:26380", "10.0.0.3:26379"}, 2, "relay", "pw", false},
		{"sentinels without a db", "redis+sentinel://s1:26379/mymaster", "", "mymaster", []string{"s1:26379"}, 0, "", "", false},
		{"IPv6 sentinels", "redis+sentinel://[::1]:26380,[fe80::1]/m", "", "m", []string{"[::1]:26380", "[fe80::1]:26379"}, 0, "", "", false},
		{"sentinels over TLS", "rediss+sentinel://s1:26379,s2:26379/main/1?dial_timeout=2s", "", "main", []string{"s1:26379", "s2:26379"}, 1, "", "", true},
		{"an escaped master name", "redis+sentinel://s1/shop%2Fmain/0", "", "shop/main", []string{"s1:26379"}, 0, "", "", false},
		{"a password with escapes", "redis+sentinel://relay:p%40ss%2Fw@s1:26379/m/0", "", "m", []string{"s1:26379"}, 0, "relay", "p@ss/w", false},
		{"--redis-sentinel-master", "redis://relay:pw@s1:26379,s2:26379/4", "mymaster", "mymaster", []string{"s1:26379", "s2:26379"}, 4, "relay", "pw", false},
		{"--redis-sentinel-master over TLS", "rediss://s1:26379", "m", "m", []string{"s1:26379"}, 0, "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTarget(tt.url, tt.master)
			if err != nil {
				t.Fatalf("ParseTarget(%q, %q): %v", tt.url, tt.master, err)
			}
			o := got.Options
			if o.DB != tt.wantDB || o.Username != tt.wantUser || o.Password != tt.wantPass || (o.TLSConfig != nil) != tt.wantTLS {
				t.Errorf("db %d, user %q, password %q, TLS %v; want %d, %q, %q, %v", o.DB, o.Username, o.Password, o.TLSConfig != nil, tt.wantDB, tt.wantUser, tt.wantPass, tt.wantTLS)
			}
			if tt.wantMaster == "" {
				if got.Sentinel != nil || o.Addr != tt.wantAddrs[0] {
					t.Errorf("got %s (sentinel %v), want the server %s", got, got.Sentinel != nil, tt.wantAddrs[0])
				}
				return
			}
			s := got.Sentinel
			if s == nil {
				t.Fatalf("got the server %s, want master %q of sentinels %v", o.Addr, tt.wantMaster, tt.wantAddrs)
			}
			if s.Master != tt.wantMaster || !slices.Equal(s.Addrs, tt.wantAddrs) {
				t.Errorf("master %q of %v, want %q of %v", s.Master, s.Addrs, tt.wantMaster, tt.wantAddrs)
			}
			if o.TLSConfig != nil && o.TLSConfig.ServerName != "" {
				t.Errorf("TLS server name %q, want none: each certificate is verified for the address dialled", o.TLSConfig.ServerName)
			}
		})
	}
}

func TestParseTarget_Errors(t *testing.T) {
	tests := []struct {
		name, url, master string
		// want is in the error or its hint; config says the error is a
		// configuration error of the form (and then must not quote the
		// password), not go-redis's.
		want   string
		config bool
	}{
		{"no master name", "redis+sentinel://relay:secret@s1:26379", "", "/<master name>", true},
		{"too long a path", "redis+sentinel://s1:26379/m/0/1", "", "/<master name>/<db>", true},
		{"two master names", "redis+sentinel://s1:26379/m/0", "other", "name the master in one place", true},
		{"an empty sentinel", "redis+sentinel://relay:secret@s1:26379,,s2/m/0", "", "empty sentinel address", true},
		{"a bad port", "redis+sentinel://s1:99999/m/0", "", `"s1:99999"`, true},
		{"go-redis's query form", "redis://sentinel:secret@s1:26379?master_name=m&password=secret", "", "redis+sentinel://", true},
		{"a path with --redis-sentinel-master", "redis://s1:26379/0/1", "m", "path must be /<db>", true},
		{"a bad database", "redis+sentinel://s1:26379/m/x", "", "invalid database", false},
		{"an unknown option", "redis+sentinel://s1:26379/m/0?bogus=1", "", "bogus", false},
		{"no scheme", "s1:26379", "", "no scheme", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseTarget(tt.url, tt.master)
			if err == nil {
				t.Fatalf("ParseTarget(%q, %q) succeeded, want an error", tt.url, tt.master)
			}
			text := err.Error() + " " + outbox.HintOf(err)
			if !strings.Contains(text, tt.want) {
				t.Errorf("error %q (hint %q) does not say %q", err, outbox.HintOf(err), tt.want)
			}
			if errors.Is(err, outbox.ErrConfig) != tt.config {
				t.Errorf("errors.Is(err, ErrConfig) = %v, want %v: %v", !tt.config, tt.config, err)
			}
			if tt.config && strings.Contains(text, "secret") {
				t.Errorf("the error quotes the password: %s", text)
			}
		})
	}
}

// TestTarget_FailoverOptionsKeepEverySetting sets every option a URL can
// carry and wants each in the failover client's options under the same
// name, so that a setting of the URL is not silently dropped with Sentinel.
func TestTarget_FailoverOptionsKeepEverySetting(t *testing.T) {
	const query = "?protocol=2&client_name=relay&max_retries=4&min_retry_backoff=1s&max_retry_backoff=2s&dial_timeout=3s&read_timeout=4s" +
		"&write_timeout=5s&pool_fifo=true&pool_size=6&pool_timeout=7s&min_idle_conns=1&max_idle_conns=2&max_active_conns=9&max_concurrent_dials=3" +
		"&pipeline_pool_size=4&pipeline_read_buffer_size=4096&pipeline_write_buffer_size=8192&conn_max_idle_time=10s&conn_max_lifetime=11s" +
		"&conn_max_lifetime_jitter=1s&skip_verify=true"
	tg, err := ParseTarget("rediss+sentinel://relay:pw@s1:26379,s2:26379/m/5"+query, "")
	if err != nil {
		t.Fatal(err)
	}
	tg.Sentinel.Username, tg.Sentinel.Password = "watcher", "spw"
	f := tg.failoverOptions(tg.Options)
	if f.MasterName != "m" || !slices.Equal(f.SentinelAddrs, []string{"s1:26379", "s2:26379"}) || f.SentinelUsername != "watcher" || f.SentinelPassword != "spw" {
		t.Errorf("master %q, sentinels %v as %q/%q; want m, [s1:26379 s2:26379] as watcher/spw", f.MasterName, f.SentinelAddrs, f.SentinelUsername, f.SentinelPassword)
	}
	ov, fv := reflect.ValueOf(tg.Options).Elem(), reflect.ValueOf(f).Elem()
	set := 0
	for i := 0; i < ov.NumField(); i++ {
		field := ov.Type().Field(i)
		// The sentinels give the address; a failover client dials TCP.
		if field.Name == "Addr" || field.Name == "Network" || ov.Field(i).IsZero() || !field.IsExported() {
			continue
		}
		set++
		got := fv.FieldByName(field.Name)
		if !got.IsValid() {
			t.Errorf("the URL sets Options.%s, which FailoverOptions lacks", field.Name)
			continue
		}
		if !reflect.DeepEqual(got.Interface(), ov.Field(i).Interface()) {
			t.Errorf("FailoverOptions.%s = %v, want the URL's %v", field.Name, got.Interface(), ov.Field(i).Interface())
		}
	}
	if set < 20 {
		t.Errorf("the URL set only %d options; the test's query should set every option go-redis parses", set)
	}
	if f.TLSConfig == nil || !f.TLSConfig.InsecureSkipVerify {
		t.Errorf("TLS %+v, want the URL's TLS with skip_verify", f.TLSConfig)
	}
}

func TestTarget_NewClientSettings(t *testing.T) {
	for _, url := range []string{"redis://127.0.0.1:6379/0", "redis+sentinel://127.0.0.1:26379/m/0"} {
		tg, err := ParseTarget(url, "")
		if err != nil {
			t.Fatal(err)
		}
		c := tg.NewClient(2 * time.Second)
		o := c.Options()
		if o.MaxRetries > 0 || o.ReadTimeout != 2*time.Second || !o.ContextTimeoutEnabled {
			t.Errorf("%s: MaxRetries %d, read timeout %s, ContextTimeoutEnabled %v; want no retries, 2s, true", url, o.MaxRetries, o.ReadTimeout, o.ContextTimeoutEnabled)
		}
		c.Close()
		if tg.Options.ReadTimeout != 0 {
			t.Errorf("%s: NewClient changed the target's options", url)
		}
	}
}

func TestSetURLPassword(t *testing.T) {
	tests := []struct {
		name, url, want string
		had             bool
	}{
		{"a user", "redis://relay@cache:6379/0", "redis://relay:p%40ss%2Fw@cache:6379/0", false},
		{"no user", "rediss://cache:6380/2?dial_timeout=1s", "rediss://:p%40ss%2Fw@cache:6380/2?dial_timeout=1s", false},
		{"sentinels", "redis+sentinel://relay@s1,s2:26380,[::1]:26379/m/1", "redis+sentinel://relay:p%40ss%2Fw@s1,s2:26380,[::1]:26379/m/1", false},
		{"a password already", "redis://relay:x@cache:6379/0", "redis://relay:x@cache:6379/0", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, had, err := SetURLPassword(tt.url, "p@ss/w")
			if err != nil || got != tt.want || had != tt.had {
				t.Errorf("SetURLPassword(%q) = %q, %v, %v; want %q, %v", tt.url, got, had, err, tt.want, tt.had)
			}
			if had {
				return
			}
			if tg, err := ParseTarget(got, ""); err != nil || tg.Options.Password != "p@ss/w" {
				t.Errorf("the URL %s parses to password %q (%v), want p@ss/w", got, tg.Options.Password, err)
			}
		})
	}
	for _, bad := range []string{"cache:6379", "redis:///0"} {
		if _, _, err := SetURLPassword(bad, "pw"); err == nil {
			t.Errorf("SetURLPassword(%q) succeeded, want an error", bad)
		}
	}
}

// TestSentinel_MasterAddrNoSentinel: sentinels that refuse connections are
// ErrNoSentinel, naming each one, with the fix.
func TestSentinel_MasterAddrNoSentinel(t *testing.T) {
	var addrs []string
	for i := 0; i < 2; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addrs = append(addrs, l.Addr().String())
		l.Close()
	}
	s := &Sentinel{Master: "m", Addrs: addrs}
	_, _, err := s.MasterAddr(context.Background(), &redis.Options{}, time.Second)
	if !errors.Is(err, ErrNoSentinel) || errors.Is(err, outbox.ErrConfig) {
		t.Fatalf("error %v, want ErrNoSentinel, retryable", err)
	}
	for _, a := range addrs {
		if !strings.Contains(err.Error(), a) {
			t.Errorf("error %q does not name %s", err, a)
		}
	}
	if !strings.Contains(outbox.HintOf(err), "sentinel addresses") {
		t.Errorf("hint %q, want the addresses to check", outbox.HintOf(err))
	}
}
