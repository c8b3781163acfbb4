package tuning

import (
	"crypto/sha256"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// readOnlySpans picks the code and the constant data of the executable,
// named by device and inode or by path: on btrfs, and on overlayfs with
// some kernels, a mapping shows the device and inode of the file system
// below, not those stat gives. Never the data (writable), a mapping with a
// private copy of a page (a breakpoint), another file of the same inode or
// a shared mapping.
func TestReadOnlySpans(t *testing.T) {
	const smaps = `00400000-01075000 r-xp 00000000 fe:00 9986268                            /tmp/bo dir/binlog-outbox
Size:              13268 kB
Rss:                8796 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me dw sd
01075000-01c9b000 r--p 00c75000 fe:00 9986268                            /tmp/bo dir/binlog-outbox
Size:              12440 kB
Rss:                9752 kB
Anonymous:             0 kB
VmFlags: rd mr mw me dw sd
01c9b000-01db1000 rw-p 0189b000 fe:00 9986268                            /tmp/bo dir/binlog-outbox
Rss:                 472 kB
Anonymous:           120 kB
01db1000-03e43000 rw-p 00000000 00:00 0
Rss:                 440 kB
Anonymous:           440 kB
02000000-02001000 r-xp 00000000 fe:00 9986268                            /tmp/bo dir/binlog-outbox (deleted)
Rss:                   4 kB
Anonymous:             4 kB
7f0000000000-7f0000010000 r--p 00000000 fe:01 9986268                    /usr/lib/other.so
Rss:                  64 kB
Anonymous:             0 kB
7f0000010000-7f0000020000 r--s 00000000 fe:00 9986268                    /tmp/bo dir/binlog-outbox
Rss:                  64 kB
Anonymous:             0 kB
7fff3de60000-7fff3de82000 rw-p 00000000 00:00 0                          [stack]
Rss:                  20 kB
`
	exe := []span{
		{start: 0x400000, end: 0x1075000, rss: 8796 << 10},
		{start: 0x1075000, end: 0x1c9b000, rss: 9752 << 10},
	}
	for _, tt := range []struct {
		name string
		exe  exeFile
		want []span
	}{
		{"by device and inode", exeFile{dev: "fe:00", ino: 9986268}, exe},
		{"by path", exeFile{dev: "00:3a", ino: 99, path: "/tmp/bo dir/binlog-outbox"}, exe},
		{"neither", exeFile{dev: "00:3a", ino: 99}, nil},
	} {
		got, err := readOnlySpans(strings.NewReader(smaps), tt.exe)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, got, tt.want)
		}
	}

	for _, bad := range []string{"zz-01 r-xp 0 fe:00 1 /x\n", "00400000-01075000 r-xp\n", "00400000-01075000 r-xp 0 fe:00 x /x\n"} {
		if _, err := readOnlySpans(strings.NewReader(bad), exeFile{dev: "fe:00", ino: 1}); err == nil {
			t.Errorf("readOnlySpans(%q): no error", bad)
		}
	}
}

func TestDevString(t *testing.T) {
	// makedev as glibc and the kernel encode a dev_t.
	makedev := func(major, minor uint64) uint64 {
		return minor&0xff | (major&0xfff)<<8 | (minor&^0xff)<<12 | (major&^0xfff)<<32
	}
	for _, c := range []struct {
		major, minor uint64
		want         string
	}{
		{0xfe, 0, "fe:00"},
		{8, 1, "08:01"},
		{0x103, 0x2ab, "103:2ab"},
		{0x1234, 1, "1234:01"},
	} {
		if got := devString(makedev(c.major, c.minor)); got != c.want {
			t.Errorf("devString(makedev(%#x, %#x)) = %q, want %q", c.major, c.minor, got, c.want)
		}
	}
}

// sentinel lives in the executable's data segment, a private mapping of
// the file: unmapping it would put back the file's values.
var sentinel = [2]uint64{0x1234, 0x5678}

func TestUnmapStartupPages(t *testing.T) {
	sentinel[0] = 42
	before := rssFileKiB(t)
	resident, err := UnmapStartupPages()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKiB(t)
	if resident <= 0 || after >= before {
		t.Fatalf("unmapped %d resident bytes; RssFile %d kB before, %d kB after: want fewer after", resident, before, after)
	}
	t.Logf("unmapped %d KiB; RssFile %d kB before, %d kB after", resident>>10, before, after)
	// The code and constants come back from the file; the data did not move.
	if sum := fmt.Sprintf("%x", sha256.Sum256([]byte("binlog-outbox"))); sum != "ae512a1d863a46c552d825ec349ff924f9a7e30fedc1b6c12b2accd38c08752e" {
		t.Fatalf("sha256 after unmapping: %s", sum)
	}
	if sentinel != [2]uint64{42, 0x5678} {
		t.Fatalf("a global after unmapping: %#x, want [0x2a 0x5678]", sentinel)
	}
}

func rssFileKiB(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}
