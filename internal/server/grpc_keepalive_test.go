package server_test

import (
	"bytes"
	"context"
	"testing"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"

	"github.com/sluicehq/sluice/memstore"
)

// TestGRPCPingFlood: the listener's keepalive enforcement (pings at most
// every 10 s, with or without calls, as Envoy's connection keepalive may
// send them) ends a connection that pings faster: a client sending PING
// after PING is sent GOAWAY ENHANCE_YOUR_CALM "too_many_pings" and
// closed, instead of having the server answer each (a PING flood,
// CVE-2019-9512, costs the server a write per frame read). Other
// connections are served.
func TestGRPCPingFlood(t *testing.T) {
	env := startRLS(t, memstore.New(memstore.Options{}), writeConf(t, plainConf), envOpts{})
	_, fr := rawConn(t, env)
	var goAway *http2.GoAwayFrame
	acks := 0
	for i := 0; goAway == nil; i++ {
		if i < 100 {
			if err := fr.WritePing(false, [8]byte{byte(i)}); err != nil {
				t.Fatalf("PING %d: %v (the connection closed before its GOAWAY was read)", i+1, err)
			}
		}
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("after %d PINGs, %d acknowledged: %v, want GOAWAY", min(i+1, 100), acks, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			acks++
		case *http2.GoAwayFrame:
			goAway = f
		}
	}
	if goAway.ErrCode != http2.ErrCodeEnhanceYourCalm || !bytes.Equal(goAway.DebugData(), []byte("too_many_pings")) {
		t.Errorf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", goAway.ErrCode, goAway.DebugData())
	}
	if acks > 4 {
		t.Errorf("%d PINGs acknowledged before the GOAWAY, want at most 4 (the first, free, then three strikes, the third over the two allowed)", acks)
	}
	for {
		if _, err := fr.ReadFrame(); err != nil {
			break // closed
		}
	}
	if _, err := env.client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "web", Descriptors: []*commonv3.RateLimitDescriptor{desc("user", "a")}}); err != nil {
		t.Errorf("a call on another connection after the flood: %v", err)
	}
}
