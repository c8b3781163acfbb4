package tuning

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// UnmapStartupPages unmaps the pages of the relay's own executable that
// are mapped read-only (its code and constant data), once start-up is done,
// and returns how many bytes of them were resident.
//
// Why: the kernel maps a file's pages in 64 KiB windows around each one a
// process touches (fault-around). Start-up runs every package's init and
// the preflight checks, code spread over the whole binary: about 300 faults
// left 16-18 MB of the binary resident, half the relay's peak RSS, though
// its own memory (anonymous) was 16-17 MB at the peak of a catch-up
// (RssFile and RssAnon of /proc/PID/status). Unmapped, the pages stay in the page cache, so the code
// the relay runs again comes back at the cost of a minor fault, and only
// its windows count again. Peak RSS falls by about 5 MB.
//
// Only mappings of the executable without write permission and without a
// page of their own (a debugger's breakpoint or a uprobe makes a private
// copy of its page, which unmapping would discard) are unmapped: nothing
// there differs from the file, so nothing is lost. A mapping is the
// executable's when its device and inode are, or its path is: on btrfs,
// and on overlayfs (a container's image) with some kernels, a mapping
// shows the device and inode of the file system below, not those stat
// gives.
func UnmapStartupPages() (int64, error) {
	exe, err := os.Stat("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("stat the executable: %w", err)
	}
	st, ok := exe.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("stat the executable: no device and inode")
	}
	path, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, fmt.Errorf("read the executable's path: %w", err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, fmt.Errorf("read the process's mappings: %w", err)
	}
	spans, err := readOnlySpans(bytes.NewReader(smaps), exeFile{dev: devString(uint64(st.Dev)), ino: st.Ino, path: path})
	if err != nil {
		return 0, fmt.Errorf("read the process's mappings: %w", err)
	}
	var resident int64
	for _, s := range spans {
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, s.start, s.end-s.start, syscall.MADV_DONTNEED); errno != 0 {
			return resident, fmt.Errorf("unmap %#x-%#x: %w", s.start, s.end, errno)
		}
		resident += s.rss
	}
	return resident, nil
}

// span is one mapping of /proc/self/smaps that readOnlySpans selected.
type span struct {
	start, end uintptr
	rss        int64 // resident bytes
}

// devString is dev as /proc/self/maps writes it: major:minor in hex.
func devString(dev uint64) string {
	major := (dev>>8)&0xfff | (dev>>32)&0xfffff000
	minor := dev&0xff | (dev>>12)&0xffffff00
	return fmt.Sprintf("%02x:%02x", major, minor)
}

// exeFile is how /proc/self/smaps may name the executable: by device (as
// devString writes it) and inode, or by path ("" matches no mapping).
type exeFile struct {
	dev  string
	ino  uint64
	path string
}

// readOnlySpans returns the mappings in smaps (the format of
// /proc/self/smaps) of the file exe that are private, not writable, and
// hold no anonymous page.
func readOnlySpans(smaps io.Reader, exe exeFile) ([]span, error) {
	var (
		spans []span
		cur   *span
		ok    bool // cur is a candidate
	)
	flush := func() {
		if cur != nil && ok {
			spans = append(spans, *cur)
		}
		cur = nil
	}
	sc := bufio.NewScanner(smaps)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") {
			// A mapping's first line: range perms offset dev inode [path].
			flush()
			if len(f) < 5 {
				return nil, fmt.Errorf("unexpected line %q", sc.Text())
			}
			lo, hi, found := strings.Cut(f[0], "-")
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			inode, err3 := strconv.ParseUint(f[4], 10, 64)
			if !found || err1 != nil || err2 != nil || err3 != nil || end < start {
				return nil, fmt.Errorf("unexpected line %q", sc.Text())
			}
			cur = &span{start: uintptr(start), end: uintptr(end)}
			// The path is the rest of the line after the inode, which
			// the kernel pads with spaces; it may hold spaces itself.
			var path string
			if parts := strings.SplitN(sc.Text(), " ", 6); len(parts) == 6 {
				path = strings.TrimLeft(parts[5], " ")
			}
			isExe := f[3] == exe.dev && inode == exe.ino || exe.path != "" && path == exe.path
			ok = isExe && len(f[1]) == 4 && f[1][1] == '-' && f[1][3] == 'p'
			continue
		}
		if cur == nil || len(f) < 2 {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue // VmFlags and the like
		}
		switch f[0] {
		case "Rss:":
			cur.rss = kb << 10
		case "Anonymous:":
			if kb != 0 {
				ok = false
			}
		}
	}
	flush()
	return spans, sc.Err()
}
