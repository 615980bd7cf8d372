package deferq

import (
	"context"
	_ "embed"
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
// reports whether the scan is over (the whole stream looked at once, by
// this instance or another): the reader then asks no more.
func (w *worker) scanOld(ctx context.Context, c rueidis.Client) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	arr, err := scanScript.Exec(ctx, c, []string{w.base + "q", w.base + "i", w.base + "scan"},
		[]string{w.tag, strconv.Itoa(scanEntries), strconv.Itoa(scanBytes), strconv.FormatInt(queuedTTL.Milliseconds(), 10)}).ToArray()
	if err != nil || len(arr) < 2 || (len(arr)-2)%3 != 0 {
		if ctx.Err() == nil {
			w.q.o.Logger.Warn("defer: scan for requests queued by an earlier version", "rule", w.name, "err", err, "values", len(arr))
		}
		return false
	}
	done, _ := arr[1].AsInt64()
	if len(arr) > 2 {
		var keys, args []string
		for i := 2; i+2 < len(arr); i += 3 {
			id, _ := arr[i].ToString()
			sid, _ := arr[i+1].ToString()
			key, _ := arr[i+2].ToString()
			keys = append(keys, w.base+"s:"+id)
			args = append(args, sid, keyDigest(key))
		}
		if err := listedScript.Exec(ctx, c, keys, args).Error(); err != nil && ctx.Err() == nil {
			// Those records get it at their turn instead (begin.lua).
			w.q.o.Logger.Warn("defer: name the key's list of requests queued by an earlier version", "rule", w.name, "err", err)
		}
	}
	return done == 1
}
