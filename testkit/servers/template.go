package servers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// staleTemplateBuild is how old an unfinished template build may get before
// another start removes it: a build takes seconds, so an older one belongs
// to a process that was killed.
const staleTemplateBuild = 30 * time.Minute

// installMariaDB runs mariadb-install-db into datadir.
func installMariaDB(ctx context.Context, installDB binary, datadir, tmpdir string) error {
	if err := installDB.sees(tmpdir); err != nil {
		return err
	}
	install := installDB.command(ctx, installArgs(datadir, tmpdir)...)
	if out, err := install.CombinedOutput(); err != nil {
		return fmt.Errorf("mariadb-install-db: %w\n%s", err, out)
	}
	return nil
}

func installArgs(datadir, tmpdir string) []string {
	return []string{"--no-defaults", "--datadir=" + datadir, "--tmpdir=" + tmpdir,
		"--auth-root-authentication-method=normal", "--skip-test-db", "--user=" + currentUser()}
}

// templateDataDir returns a data directory that mariadb-install-db made for
// this pair of binaries under root, making it when it is missing. The
// install bootstraps a server, which costs most of a start; a copy of its
// result is the same fresh data directory.
func templateDataDir(ctx context.Context, root string, mariadbd, installDB binary) (string, error) {
	key, err := templateKey(mariadbd, installDB)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, key)
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(data); err == nil {
		return data, nil
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("mariadb template: %w", err)
	}
	removeStaleBuilds(root, key)
	// Test binaries of several packages start servers at once: each builds
	// in a directory of its own and renames it into place, which succeeds
	// for one of them; the others use the winner's.
	build, err := os.MkdirTemp(root, key+".build-")
	if err != nil {
		return "", fmt.Errorf("mariadb template: %w", err)
	}
	defer os.RemoveAll(build)
	tmp := filepath.Join(build, "tmp")
	if err := os.Mkdir(tmp, 0o755); err != nil {
		return "", fmt.Errorf("mariadb template: %w", err)
	}
	if err := installMariaDB(ctx, installDB, filepath.Join(build, "data"), tmp); err != nil {
		return "", err
	}
	if err := os.Rename(build, dir); err != nil {
		if _, serr := os.Stat(data); serr == nil {
			return data, nil
		}
		return "", fmt.Errorf("mariadb template: %w", err)
	}
	return data, nil
}

// templateKey names a template by what makes its content: the binaries (an
// upgrade changes their size or time), the install arguments and the user.
func templateKey(bins ...binary) (string, error) {
	h := sha256.New()
	for _, bin := range bins {
		st, err := os.Stat(bin.hostPath())
		if err != nil {
			return "", fmt.Errorf("mariadb template: %w", err)
		}
		fmt.Fprintf(h, "%s %d %d\n", bin, st.Size(), st.ModTime().UnixNano())
	}
	fmt.Fprintln(h, strings.Join(installArgs("", ""), " "))
	return "mariadb-" + hex.EncodeToString(h.Sum(nil))[:16], nil
}

// removeStaleBuilds removes the build directories that killed processes
// left under root; each holds a full data directory.
func removeStaleBuilds(root, key string) {
	builds, _ := filepath.Glob(filepath.Join(root, key+".build-*"))
	for _, b := range builds {
		if st, err := os.Stat(b); err == nil && time.Since(st.ModTime()) > staleTemplateBuild {
			_ = os.RemoveAll(b)
		}
	}
}

// copyTree copies the directories and regular files under src to dst, which
// must not exist, keeping their permissions.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(target, info.Mode().Perm())
		case info.Mode().IsRegular():
			return copyFile(path, target, info.Mode().Perm())
		default:
			return fmt.Errorf("copy %s: %w", path, errors.ErrUnsupported)
		}
	})
}

func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", src, err)
	}
	return out.Close()
}
