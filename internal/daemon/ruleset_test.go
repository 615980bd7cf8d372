package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/internal/config"
)

// TestBuildUsesValidatedRules: the daemon runs the Set the config's
// validation compiled rather than compile the rules a second time (twice
// the time of a reload of a large config); a config changed in Go after
// it was read runs the rules it holds now.
func TestBuildUsesValidatedRules(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sluice.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\nrules:\n  - {name: a, rate: 1/s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, changed := range []bool{false, true} {
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		validated, err := cfg.RuleSet()
		if err != nil {
			t.Fatal(err)
		}
		if changed {
			cfg.Rules[0].Rate = "7/s"
		}
		d, err := New(cfg, Options{})
		if err != nil {
			t.Fatal(err)
		}
		got := d.cur.Load().rules
		d.Close()
		if !changed && got != validated {
			t.Errorf("unchanged config: the daemon runs Set %p, want the one validation compiled (%p)", got, validated)
		}
		if changed && (got == validated || got.Rule("a").Limit.Rate != 7) {
			t.Errorf("rate changed to 7/s after Load: the daemon runs rate %d/%v", got.Rule("a").Limit.Rate, got.Rule("a").Limit.Period)
		}
	}
}
