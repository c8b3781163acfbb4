package servers

import (
	"context"
	"crypto/tls"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisReadyTimeout bounds a start, AOF loading included.
const redisReadyTimeout = 30 * time.Second

// Redis is a private redis-server process without a password.
type Redis struct {
	bin  binary
	dir  string
	args []string
	tls  *RedisTLS
	// wrapper, when set, is a program and its arguments the server runs
	// under (StartRedisUnder).
	wrapper []string
	port    int
	// clusterPort is the cluster bus port of a cluster node, 0 for a
	// standalone server.
	clusterPort int
	handle
}

// RedisTLS makes a private Redis speak TLS only (--tls-port, --port 0), with
// the certificate and key of CertFile and KeyFile (PEM files). CAFile is the
// CA bundle the server trusts for client certificates. With ClientCertFile
// and ClientKeyFile the server requires a client certificate
// (--tls-auth-clients yes), and the readiness probe presents this one.
type RedisTLS struct {
	CertFile, KeyFile, CAFile     string
	ClientCertFile, ClientKeyFile string
}

// StartRedis starts redis-server on a free loopback port with its AOF and
// log in dir (which must exist). args follow the fixed ones (port, dir, log),
// so they carry the server settings; a later option overrides an earlier one.
func StartRedis(ctx context.Context, dir string, args []string) (*Redis, error) {
	return StartRedisTLS(ctx, dir, args, nil)
}

// StartRedisUnder is StartRedis for a server that runs under another
// program, wrapper[0] run with wrapper[1:] and then redis-server's own
// command line: the benchmark counts Redis's instructions with valgrind's
// callgrind, which the load of the machine does not move as it does CPU time.
// The process, and Pid, are the wrapper's, which valgrind is.
func StartRedisUnder(ctx context.Context, dir string, args, wrapper []string) (*Redis, error) {
	if len(wrapper) == 0 {
		return StartRedis(ctx, dir, args)
	}
	if treeRoot() != "" {
		return nil, fmt.Errorf("redis: %s=%s: a server run under %s must be this machine's", EnvRoot, treeRoot(), wrapper[0])
	}
	bin, err := lookRedis("-server")
	if err != nil {
		return nil, err
	}
	w, err := exec.LookPath(wrapper[0])
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	r := &Redis{bin: binary{path: w}, dir: dir, args: args, wrapper: append(wrapper[1:len(wrapper):len(wrapper)], bin.path)}
	if r.port, err = onFreePort(func(port int) error { r.port = port; return r.Start(ctx) }); err != nil {
		return nil, err
	}
	return r, nil
}

// StartRedisTLS is StartRedis for a server that speaks TLS only, on the
// port Addr returns; t nil is StartRedis.
func StartRedisTLS(ctx context.Context, dir string, args []string, t *RedisTLS) (*Redis, error) {
	bin, err := lookRedis("-server")
	if err != nil {
		return nil, err
	}
	r := &Redis{bin: bin, dir: dir, args: args, tls: t}
	if r.port, err = onFreePort(func(port int) error { r.port = port; return r.Start(ctx) }); err != nil {
		return nil, err
	}
	return r, nil
}

// Start starts the server on its port and directory and waits until it takes
// writes: after Kill, it is a restart from the AOF.
func (r *Redis) Start(ctx context.Context) error {
	args := []string{"--port", strconv.Itoa(r.port)}
	if r.clusterPort != 0 {
		args = append(args, "--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(r.clusterPort),
			"--cluster-config-file", filepath.Join(r.dir, "nodes.conf"))
	}
	probeTLS, err := r.ProbeTLS()
	if err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if r.tls != nil {
		auth := "no"
		if r.tls.ClientCertFile != "" {
			auth = "yes"
		}
		args = []string{"--port", "0", "--tls-port", strconv.Itoa(r.port),
			"--tls-cert-file", r.tls.CertFile, "--tls-key-file", r.tls.KeyFile, "--tls-ca-cert-file", r.tls.CAFile,
			"--tls-auth-clients", auth}
	}
	args = append(append(args,
		"--bind", "127.0.0.1",
		"--dir", r.dir,
		"--logfile", r.LogPath(),
		"--daemonize", "no",
		"--protected-mode", "no",
	), r.args...)
	if r.wrapper != nil {
		args = append(slices.Clip(r.wrapper), args...)
	}
	if err := r.run(ctx, r.bin, args, filepath.Join(r.dir, "stdout.log"), r.LogPath(), redisReadyTimeout, func(ctx context.Context) error {
		// A bare probe, not redisconn.ClientOptions: redisstream's tests
		// start their servers through this package. One attempt per poll.
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: time.Second, ContextTimeoutEnabled: true, TLSConfig: probeTLS})
		defer c.Close()
		if r.clusterPort != 0 {
			// A node takes no writes before it has slots; the cluster's
			// readiness is RedisCluster's to check.
			return c.Ping(ctx).Err()
		}
		// PING answers while the AOF still loads; a write proves readiness.
		// An OOM reply also proves it: the data set is loaded and full; so
		// does READONLY, a replica's (--replicaof) refusal once it is up.
		err := c.Set(ctx, "binlog-outbox:ready", "1", time.Second).Err()
		if redis.IsOOMError(err) || redis.IsReadOnlyError(err) {
			return nil
		}
		return err
	}); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// Addr returns 127.0.0.1:port.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.port) }

// Port returns the server's port, e.g. for a replica's --replicaof.
func (r *Redis) Port() int { return r.port }

// URL returns a redis:// URL for logical database db, rediss:// with TLS.
func (r *Redis) URL(db int) string {
	scheme := "redis"
	if r.tls != nil {
		scheme = "rediss"
	}
	return fmt.Sprintf("%s://%s/%d", scheme, r.Addr(), db)
}

// ProbeTLS returns the TLS configuration of a client that administers a
// server started with RedisTLS, nil for one without: it presents the
// client certificate and does not verify the server's, which the tests of
// verification may have made wrong or expired on purpose.
func (r *Redis) ProbeTLS() (*tls.Config, error) {
	if r.tls == nil {
		return nil, nil
	}
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // an admin probe of a test server, see above
	if r.tls.ClientCertFile != "" {
		pair, err := tls.LoadX509KeyPair(r.tls.ClientCertFile, r.tls.ClientKeyFile)
		if err != nil {
			return nil, fmt.Errorf("load the probe's client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// Dir returns the server's directory (AOF and log).
func (r *Redis) Dir() string { return r.dir }

// LogPath returns the server's log.
func (r *Redis) LogPath() string { return filepath.Join(r.dir, "redis.log") }
