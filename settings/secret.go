package settings

import (
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"syscall"

	outbox "github.com/binlog-outbox/binlog-outbox"
	"github.com/binlog-outbox/binlog-outbox/internal/logging"
)

// secretReader reads password and key files, and warns about those others
// may read.
type secretReader struct{ log *slog.Logger }

// read reads a password from a file (a mounted Docker or Kubernetes
// secret), so that it never stands on a command line, in the environment or
// in a process listing. One trailing newline, as editors and `echo` write
// it, is not part of the password. Errors name the file, never its content.
func (r secretReader) read(path, flag string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", outbox.WithHint(fmt.Errorf("%w: %s: %v", outbox.ErrConfig, flag, err),
			"point %s at a readable file holding only the password", flag)
	}
	s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if s == "" {
		return "", outbox.WithHint(fmt.Errorf("%w: %s: %s is empty", outbox.ErrConfig, flag, path),
			"write the password into the file, or drop %s", flag)
	}
	r.checkMode(path, flag)
	return s, nil
}

// checkMode warns, as ssh does of a private key, when users other than the
// relay's may read or write the secret in path: any of them could take it.
// The group counts when it is not one of the relay's own groups, so that a
// Kubernetes secret volume (0440, group fsGroup) or a key shared with the
// relay through a group (0640 root:relay, as PostgreSQL accepts) stays
// quiet. A warning, not an error: a mounted secret's mode is not always the
// relay's to choose.
func (r secretReader) checkMode(path, flag string) {
	st, err := os.Stat(path)
	if err != nil {
		return
	}
	perm := st.Mode().Perm()
	if perm&0o007 == 0 && (perm&0o070 == 0 || ownGroup(st)) {
		return
	}
	r.log.Warn(fmt.Sprintf("%s %s is accessible to other users (mode %04o)", flag, path, perm),
		"file", path, logging.KeyHint, fmt.Sprintf("chmod 600 %s (a Kubernetes secret volume: defaultMode: 0440 with the pod's fsGroup)", path))
}

// ownGroup says the file's group is one of the process's groups.
func ownGroup(st os.FileInfo) bool {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return false
	}
	if int(sys.Gid) == os.Getegid() {
		return true
	}
	groups, err := os.Getgroups()
	return err == nil && slices.Contains(groups, int(sys.Gid))
}
