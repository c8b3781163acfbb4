package preflight

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
)

// A server that wants a client certificate the relay did not give either
// sends its alert or, when the alert loses the race with the client's first
// command (TLS 1.3), only resets the connection: both get the fix that
// names the certificate flags. With a certificate given, or without TLS, a
// reset is no TLS failure.
func TestTLSFix_ClientCertificate(t *testing.T) {
	reset := &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ECONNRESET)}
	alert := &net.OpError{Op: "remote error", Err: errors.New("tls: certificate required")}
	noCert := &tls.Config{}
	withCert := &tls.Config{Certificates: []tls.Certificate{{}}}
	for _, tt := range []struct {
		name string
		err  error
		cfg  *tls.Config
		want string // "" for no fix
	}{
		{"the server's alert", alert, noCert, "--redis-tls-cert and --redis-tls-key"},
		{"a reset without a certificate", reset, noCert, "closed the connection after the TLS handshake: if it requires a client certificate, give one signed by a CA it trusts with --redis-tls-cert and --redis-tls-key"},
		{"a reset wrapped", errors.Join(errors.New("dial"), reset), noCert, "--redis-tls-cert"},
		{"end of file without a certificate", io.EOF, noCert, "--redis-tls-cert"},
		{"a broken pipe without a certificate", os.NewSyscallError("write", syscall.EPIPE), noCert, "--redis-tls-cert"},
		{"a reset with a certificate", reset, withCert, ""},
		{"a reset without TLS", reset, nil, ""},
		{"a refused connection", os.NewSyscallError("connect", syscall.ECONNREFUSED), noCert, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := tlsFix(tt.err, "redis", tt.cfg)
			if tt.want == "" && got != "" || !strings.Contains(got, tt.want) {
				t.Errorf("tlsFix(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}
