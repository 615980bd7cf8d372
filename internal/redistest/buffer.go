package redistest

import (
	"bytes"
	"strings"
	"sync"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use: the output of a
// process the test started, written while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Lines returns what was written so far as lines, without the last
// newline.
func (b *SyncBuffer) Lines() []string {
	return strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
}
