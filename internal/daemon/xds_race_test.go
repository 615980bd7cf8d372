package daemon

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
)

// Reloads of the config file racing the xDS server's versions: each is
// applied whole, neither undoes the other (the last version and the last
// config file are both in force at the end).
func TestXDSReloadRacesUpdates(t *testing.T) {
	x := startXDSServer(t)
	ed := startXDSDaemon(t, x)
	x.set("v0", rlc("shop", "shop", perDay("tenant", "acme", 1)))
	x.waitACK("v0")
	data, err := os.ReadFile(ed.path)
	if err != nil {
		t.Fatal(err)
	}
	plain, headers := string(data), strings.Replace(string(data), "grpc:\n", "grpc:\n  response_headers: true\n", 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 1; i <= 20; i++ {
			x.set(fmt.Sprint("v", i), rlc("shop", "shop", perDay("tenant", "acme", uint32(i+1))))
		}
	})
	for i := range 21 {
		text := plain
		if i%2 == 0 {
			text = headers
		}
		if err := os.WriteFile(ed.path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := ed.d.Reload(); err != nil {
			t.Fatalf("Reload %d: %v", i, err)
		}
	}
	wg.Wait()
	x.waitACK("v20")
	if got := ed.limitOf("shop", "tenant", "acme"); got != 21 {
		t.Errorf("after v20, shop tenant=acme limit %d, want 21", got)
	}
	if !ed.d.Config().GRPC.ResponseHeaders {
		t.Error("the last config file (response_headers: true) is not in force")
	}
}
