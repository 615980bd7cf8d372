package fleet_test

import (
	"context"
	"testing"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/fleet"
	"github.com/sluicehq/sluice/memstore"
	"github.com/sluicehq/sluice/sluicetest"
)

// TestOverLimitNamespaces: a refusal remembered for one limiter is not
// served to another with the same algorithm and limit but another name.
func TestOverLimitNamespaces(t *testing.T) {
	c := fleet.NewOverLimitCache(memstore.New(memstore.Options{}), fleet.OverLimitOptions{})
	clk := sluicetest.NewClock(sluicetest.T0)
	login, _ := sluice.NewLimiter(c, sluice.FixedWindow, sluice.PerMinute(1), sluice.WithName("login"), sluice.WithClock(clk.Now))
	signup, _ := sluice.NewLimiter(c, sluice.FixedWindow, sluice.PerMinute(1), sluice.WithName("signup"), sluice.WithClock(clk.Now))
	ctx := context.Background()
	login.Allow(ctx, "k")
	if d, _ := login.Allow(ctx, "k"); d.Allowed {
		t.Fatal("login #2 allowed")
	}
	if d, _ := signup.Allow(ctx, "k"); !d.Allowed {
		t.Fatalf("signup #1 refused (login's remembered refusal served across namespaces): %+v", d)
	}
}
