package logging

import (
	"bytes"
	"sync"
)

// Buffer is an io.Writer that keeps what is written to it, safe for
// concurrent use: it captures a child process's output (stdout and stderr are
// copied by two goroutines) or a logger's lines, to be read while the writers
// still write. The zero value keeps everything.
type Buffer struct {
	// Max, when positive, caps what is kept: once Max bytes are held, later
	// writes are dropped (and reported as written, so the writer carries on),
	// so that a chatty relay measured for hours cannot fill the memory.
	Max int

	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Max > 0 && b.b.Len() > b.Max {
		return len(p), nil
	}
	return b.b.Write(p)
}

// String returns what was kept so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
