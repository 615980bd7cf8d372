package deferq

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/rueidis"
)

//go:embed scan.lua
var scanLua string

//go:embed listed.lua
var listedLua string

var (
	scanScript   = rueidis.NewLuaScript(scanLua)
	listedScript = rueidis.NewLuaScript(listedLua)
)

// What one scan for the requests an earlier version queued looks at, at
// most, per claim round: 500 entries, fewer once they hold 8 MiB. So a
// full queue of 10,000 is looked at within 20 rounds, and a round holds
// Redis for about as long as a claim of that many entries.
const (
	scanEntries = 500
	scanBytes   = 8 << 20
)

// scanOld indexes a slice of the requests an earlier version queued, from
// where the fleet's scan stopped (scan.lua), and names their keys' lists
// in their records (listed.lua), so that a claim round or a sweep that
// finds one gone cleans it as it cleans one this version queued. It
// reports whether the scan is over (the stream, up to its last entry
// when the scan began, looked at once, by this instance or another): the
// reader then asks no more.
func (w *worker) scanOld(ctx context.Context, c rueidis.Client) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := w.scanSlice(ctx, c, scanEntries, scanBytes)
	if err != nil {
		if ctx.Err() == nil {
			w.q.o.Logger.Warn("defer: scan for requests queued by an earlier version", "rule", w.name, "err", err)
		}
		return false
	}
	if len(s.reqs) == 0 {
		return s.done
	}
	done, err := w.nameLists(ctx, c, s)
	if err != nil && ctx.Err() == nil {
		// The state stays: the next step looks at the same slice again.
		w.q.o.Logger.Warn("defer: name the key's list of requests queued by an earlier version", "rule", w.name, "err", err)
	}
	return done
}

// scanned is what one run of scan.lua found: whether it reached the
// scan's end, and the requests whose records name no key's list, with
// the scan's state it started from and the one to move it to once they
// are named (it moved it itself when there are none).
type scanned struct {
	looked   int // entries looked at
	done     bool
	from, to string
	reqs     []oldRequest
}

// oldRequest is a request an earlier version queued: its id, its entry
// and its limiter key.
type oldRequest struct{ id, sid, key string }

// scanSlice runs scan.lua on the next slice of the stream: most entries
// at most, fewer once they hold bytes.
func (w *worker) scanSlice(ctx context.Context, c rueidis.Client, most, bytes int) (scanned, error) {
	arr, err := scanScript.Exec(ctx, c, []string{w.base + "q", w.base + "i", w.base + "scan"},
		[]string{w.tag, strconv.Itoa(most), strconv.Itoa(bytes), strconv.FormatInt(queuedTTL.Milliseconds(), 10)}).ToArray()
	if err != nil {
		return scanned{}, err
	}
	if len(arr) < 4 || (len(arr)-4)%3 != 0 {
		return scanned{}, fmt.Errorf("scan.lua: %d values", len(arr))
	}
	looked, _ := arr[0].AsInt64()
	done, _ := arr[1].AsInt64()
	s := scanned{looked: int(looked), done: done == 1}
	s.from, _ = arr[2].ToString()
	s.to, _ = arr[3].ToString()
	for i := 4; i+2 < len(arr); i += 3 {
		id, _ := arr[i].ToString()
		sid, _ := arr[i+1].ToString()
		key, _ := arr[i+2].ToString()
		s.reqs = append(s.reqs, oldRequest{id, sid, key})
	}
	return s, nil
}

// nameLists indexes the requests scanSlice found and names their keys'
// lists in their records, then moves the scan's state on (listed.lua). It
// reports whether the scan is over.
func (w *worker) nameLists(ctx context.Context, c rueidis.Client, s scanned) (bool, error) {
	keys := []string{w.base + "i", w.base + "scan"}
	args := []string{s.from, s.to, strconv.FormatInt(queuedTTL.Milliseconds(), 10)}
	for _, r := range s.reqs {
		keys = append(keys, w.base+"s:"+r.id)
		args = append(args, r.id, r.sid, keyDigest(r.key))
	}
	n, err := listedScript.Exec(ctx, c, keys, args).AsInt64()
	return n == 1, err
}
