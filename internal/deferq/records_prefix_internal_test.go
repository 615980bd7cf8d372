package deferq

import (
	"context"
	"testing"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/redistest"
)

// The records' MATCH pattern is the prefix quoted: a prefix with glob
// characters names no other keys (another prefix's records, which that
// prefix's pass judges by its own stream), and the pass still meets the
// rule's own; a prefix with a byte that is not UTF-8 too.
func TestRecordsPassPrefixQuoted(t *testing.T) {
	srv := redistest.StartServer(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()
	for _, tc := range []struct{ prefix, other string }{
		{prefix: `p*[ab]?:`, other: `pzza!:`},
		{prefix: `p*[ab]?\:`, other: `pzza!:`},
		{prefix: "p\xff:", other: "p\xfe:"},
	} {
		w := recordsWorker(t, c, tc.prefix)
		if err := c.Do(ctx, c.B().XgroupCreate().Key(w.base+"q").Group(group).Id("0").Mkstream().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		own := w.base + "s:" + w.tag + "-00000000000000000001"
		other := tc.other + w.base[len(tc.prefix):] + "s:" + w.tag + "-00000000000000000002"
		for _, k := range []string{own, other} {
			if err := c.Do(ctx, c.B().Hset().Key(k).FieldValue().FieldValue("state", "queued").FieldValue("sid", "1-1").Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		passOnce(t, w, c)
		if e, err := c.Do(ctx, c.B().Exists().Key(other).Build()).AsInt64(); err != nil || e != 1 {
			t.Errorf("prefix %q: the record %q of another prefix deleted by its pass (%v)", tc.prefix, other, err)
		}
		if e, err := c.Do(ctx, c.B().Exists().Key(own).Build()).AsInt64(); err != nil || e != 0 {
			t.Errorf("prefix %q: the rule's own record of a request gone left by its pass (%v)", tc.prefix, err)
		}
	}
}
