package servers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// Environment variables that choose which server binaries run: the suite
// runs once on the machine's own and again on a Debian 13 tree's
// (scripts/test.sh, TESTING.md).
const (
	// EnvRoot is the root of another system's tree (scripts/trixie-tree.sh
	// makes one with debootstrap) whose server binaries the private
	// servers run from, chrooted into it. The directories the servers are
	// given must be the same directories inside the tree: run the tests
	// under `scripts/trixie-tree.sh run`, which mounts the temporary
	// directory there.
	EnvRoot = "BINLOG_OUTBOX_TEST_ROOT"
	// EnvRedis is "redis" (the default: redis-server, redis-cli) or
	// "valkey" (valkey-server, valkey-cli) for every private Redis,
	// sentinel and Cluster node.
	EnvRedis = "BINLOG_OUTBOX_TEST_REDIS"
)

// binary is a server program: its path as it sees itself, and the root it
// runs chrooted into ("" for the machine's own).
type binary struct {
	root, path string
}

// String returns the program's path on this machine.
func (b binary) String() string { return b.hostPath() }

// hostPath is the program's file as this process sees it.
func (b binary) hostPath() string { return filepath.Join("/", b.root, b.path) }

// command returns the command that runs the program with args; in a tree it
// starts chrooted into it, in its root directory.
func (b binary) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, b.path, args...)
	if b.root != "" {
		// exec looks the program up in the tree only after the chroot.
		cmd.Path = b.path
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: b.root}
		cmd.Dir = "/"
	}
	return cmd
}

// sees checks that a program of the tree sees dir where this process does:
// a server given a directory the tree lacks fails with a message about
// its data directory that names none of this.
func (b binary) sees(dir string) error {
	if b.root == "" {
		return nil
	}
	here, err := os.Stat(dir)
	if err != nil {
		return err
	}
	there, err := os.Stat(filepath.Join(b.root, dir))
	if err != nil || !os.SameFile(here, there) {
		return fmt.Errorf("%s is not the same directory inside %s=%s; run the tests under scripts/trixie-tree.sh run, which mounts the temporary directory there", dir, EnvRoot, b.root)
	}
	return nil
}

// treeRoot returns the tree the servers run from ("" for this machine).
func treeRoot() string { return os.Getenv(EnvRoot) }

// redisProgram returns the name of the Redis server ("redis-server" or
// "valkey-server") or its client ("-cli") that EnvRedis chooses.
func redisProgram(suffix string) (string, error) {
	switch v := os.Getenv(EnvRedis); v {
	case "", "redis":
		return "redis" + suffix, nil
	case "valkey":
		return "valkey" + suffix, nil
	default:
		return "", fmt.Errorf("%s=%q: want redis or valkey", EnvRedis, v)
	}
}

// lookRedis finds the Redis server program, or with suffix "-cli" its
// client.
func lookRedis(suffix string) (binary, error) {
	name, err := redisProgram(suffix)
	if err != nil {
		return binary{}, err
	}
	return lookBinary(name)
}

// lookBinary finds a server binary in the tree of EnvRoot or, without one,
// in PATH or the sbin directories Debian installs servers to, which are not
// in a normal user's PATH.
func lookBinary(name string) (binary, error) {
	if root := treeRoot(); root != "" {
		for _, dir := range []string{"/usr/sbin", "/usr/bin", "/sbin", "/bin"} {
			p := filepath.Join(dir, name)
			if st, err := os.Stat(filepath.Join(root, p)); err == nil && !st.IsDir() {
				return binary{root: root, path: p}, nil
			}
		}
		return binary{}, fmt.Errorf("%w: %s is not in the tree %s=%s; scripts/trixie-tree.sh installs it there", ErrNotFound, name, EnvRoot, root)
	}
	if p, err := exec.LookPath(name); err == nil {
		return binary{path: p}, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return binary{path: p}, nil
		}
	}
	return binary{}, fmt.Errorf("%w: %s is not in PATH or /usr/sbin; install it with: %s", ErrNotFound, name, InstallCommand)
}
