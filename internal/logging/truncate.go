package logging

// Truncate shortens s to its first n bytes followed by "...", for a value
// quoted in a log line or an error message (a DDL statement, a position the
// relay cannot decode): a multi-kilobyte statement must not flood the log,
// and the start is what an operator recognises it by.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
