package redisstream

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Process identifies a lease holder's process well enough for another
// process to prove it gone: the boot of the kernel it runs on, its PID
// namespace, its PID there and when it started. The host name alone proves
// nothing: containers with host networking share it, and so does a machine
// rebooted since.
type Process struct {
	// BootID is /proc/sys/kernel/random/boot_id: new at each boot, and
	// the same for every container on one kernel.
	BootID string `json:"boot_id"`
	// PIDNamespace is the link /proc/self/ns/pid ("pid:[4026531836]"):
	// PIDs mean the same process only within one namespace.
	PIDNamespace string `json:"pid_ns"`
	PID          int    `json:"pid"`
	// Start is the process's start time in clock ticks after boot
	// (/proc/PID/stat, field 22): a PID reused by another process has
	// another one.
	Start uint64 `json:"start"`
}

// procRoot is where the kernel's process table is read; tests point it at
// a copy they make up.
var procRoot = "/proc"

// SelfProcess returns this process's identity, ok false where it cannot be
// read (no /proc, or a /proc of another PID namespace than this process's):
// a lease without it can only expire.
func SelfProcess() (p Process, ok bool) {
	boot, err := os.ReadFile(procRoot + "/sys/kernel/random/boot_id")
	if err != nil {
		return Process{}, false
	}
	ns, err := os.Readlink(procRoot + "/self/ns/pid")
	if err != nil {
		return Process{}, false
	}
	pid := os.Getpid()
	start, state := processStart(pid)
	if state != processAlive {
		// This process is not in this /proc: it shows another namespace.
		return Process{}, false
	}
	return Process{BootID: strings.TrimSpace(string(boot)), PIDNamespace: ns, PID: pid, Start: start}, true
}

// processState is what this process's /proc says of another process.
type processState int

const (
	processGone    processState = iota // no such process, or only its zombie
	processAlive                       // running, with the start time read
	processUnknown                     // its stat could not be parsed: taken as alive
)

// processStart reads the start time of process pid of this process's /proc.
// A zombie holds no connection and appends nothing: it is gone.
func processStart(pid int) (start uint64, state processState) {
	stat, err := os.ReadFile(procRoot + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, processGone
	}
	// The fields after the command name, which is in parentheses and may
	// hold spaces and parentheses: state is field 3, starttime 22.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, processUnknown
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return 0, processUnknown
	}
	if f[0] == "Z" || f[0] == "X" {
		return 0, processGone
	}
	start, err = strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return 0, processUnknown
	}
	return start, processAlive
}

// provablyGone reports whether holder, a lease's process, is known to have
// exited, as seen by self: both on the same boot and in the same PID
// namespace, and no process with holder's PID and start time there. Anything
// less certain is false: a process of another machine, container or boot
// may be alive, and its lease must expire first.
func provablyGone(holder, self *Process) (gone bool, why string) {
	switch {
	case holder == nil || self == nil || holder.BootID == "" || holder.PIDNamespace == "" || holder.PID <= 0:
		return false, ""
	case holder.BootID != self.BootID || holder.PIDNamespace != self.PIDNamespace:
		return false, ""
	case *holder == *self:
		return false, "" // this very process: its own take, not a dead one
	}
	start, state := processStart(holder.PID)
	switch {
	case state == processGone:
		return true, fmt.Sprintf("process %d has exited", holder.PID)
	case state == processAlive && start != holder.Start:
		return true, fmt.Sprintf("process %d has exited; its PID now belongs to a process started later", holder.PID)
	}
	return false, ""
}
