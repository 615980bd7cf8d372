# Sluice: `make test` runs everything CI runs: formatting, vet (the bench/
# module included) and every test, fuzz seed corpora included. It searches
# for no new inputs: exploratory fuzzing is `make fuzz`.
GO ?= go
# Packages whose tests need no race detector (pure, single-goroutine code
# runs under it anyway; listing nothing here keeps -race on everything).
RACE ?= -race
# The tests that skip under -race, and their packages, run without it by
# `unit` (scripts/check-norace-tests.sh keeps both lists complete).
NORACE_TESTS = TestLimiterHotPathAllocatesNothing|TestWaitNBoundedAllocatesNothing|TestSlidingLogSteadyAllocatesNothing|TestMemoryBound1M|TestDecideDescriptorsAllocations|TestShouldRateLimitAllocations|TestTakeAllUpTo8AllocatesNothing
NORACE_PKGS = . ./memstore ./fleet ./internal/engine ./internal/server

.PHONY: test vet unit fuzz check-traefik bench bench-core bench-redis bench-load bench-gateway bench-envoy bench-fleet build clean

test: vet unit

build:
	$(GO) build -o sluice ./cmd/sluice

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags traefik ./internal/gatewaytest
	cd bench && $(GO) vet ./... && $(GO) build ./...
	sh scripts/check-fuzz-targets.sh
	sh scripts/check-norace-tests.sh

# Unit, conformance, integration (real redis-server and a real 3-node Redis
# Cluster, started on free loopback ports by internal/redistest) and
# end-to-end tests, among them real nginx and Caddy in front of the daemon
# (internal/gatewaytest), then the bench module's harness (the paced load
# generator and its HTTP/1.1 client, the parsers of wrk's and /proc's
# figures) and the pure parts of the load runs (best-run selection,
# ratios, the soft bound's formula, bench/redis's latency set).
# ensure-redis and ensure-gateways install Redis, nginx and Caddy when they
# are missing.
unit:
	sh scripts/ensure-redis.sh
	sh scripts/ensure-gateways.sh
	$(GO) test $(RACE) -count=1 -timeout 20m ./...
	cd bench && $(GO) test $(RACE) -count=1 ./internal/... ./gateway ./fleetload ./load ./benchtable
	cd bench/redis && $(GO) test $(RACE) -count=1 -run '^TestMeasure' .
	# The tests that skip themselves under -race (heap and allocation
	# counts, which the race detector's own allocations make meaningless),
	# run once more without it; `vet` fails when one is missing here.
	$(GO) test -count=1 -run '^($(NORACE_TESTS))$$' $(NORACE_PKGS)

# The examples/gateways/traefik configs with a real Traefik, which is not
# in Debian's packages, so this is not part of `make test`: give it a
# Traefik v3 binary, `TRAEFIK=/path/to/traefik make check-traefik`. It
# starts Traefik, two Sluices and an app on free loopback ports, checks
# the limit, the 429, spoofed headers, the load-balancer variant and
# Sluice down or hanging (Traefik's 30 s timeout: the run takes about 40 s),
# and compares, header by header, what Traefik sent Sluice with what the
# emulation in `make test` sends.
check-traefik:
	@test -n "$(TRAEFIK)" || { echo "check-traefik: set TRAEFIK to a Traefik v3 binary: TRAEFIK=/path/to/traefik make check-traefik" >&2; exit 2; }
	TRAEFIK="$(TRAEFIK)" $(GO) test -tags traefik -count=1 -v -run '^TestRealTraefik' ./internal/gatewaytest

# Exploratory runs of every native fuzz target: each searches for new
# inputs, so it is a search, not a test, and is not part of `make test`
# (whose `unit` stage runs the committed seed corpora, testdata/fuzz/). Run
# it before landing a change to a parser, the config loader or a wire
# format; fix what it finds and commit the input as a seed.
# `vet` fails when a Fuzz function is missing here. Budgets are execution counts, about 10 s of each target on this machine,
# not durations: Go 1.26's fuzz coordinator can report a spurious "context
# deadline exceeded" failure when a -fuzztime duration expires mid-run
# (golang/go#75804, fixed in Go 1.27); a count has no deadline to race.
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseLimit$$' -fuzztime 200000x .
	$(GO) test -run '^$$' -fuzz '^FuzzParseTrace$$' -fuzztime 50000x ./internal/sim
	$(GO) test -run '^$$' -fuzz '^FuzzPlot$$' -fuzztime 40000x ./internal/sim
	$(GO) test -run '^$$' -fuzz '^FuzzParseConfig$$' -fuzztime 10000x ./internal/config
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 20000x ./internal/descriptors
	$(GO) test -run '^$$' -fuzz '^FuzzParseForwarded$$' -fuzztime 200000x ./clientip
	$(GO) test -run '^$$' -fuzz '^FuzzClientIP$$' -fuzztime 200000x ./clientip
	$(GO) test -run '^$$' -fuzz '^FuzzKeyFor$$' -fuzztime 200000x ./internal/rules
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalPath$$' -fuzztime 200000x ./internal/rules
	$(GO) test -run '^$$' -fuzz '^FuzzPrefixAsServeMux$$' -fuzztime 200000x ./internal/rules
	$(GO) test -run '^$$' -fuzz '^FuzzQueryValue$$' -fuzztime 200000x ./internal/rules
	$(GO) test -run '^$$' -fuzz '^FuzzMatchRepeated$$' -fuzztime 200000x ./internal/rules
	$(GO) test -run '^$$' -fuzz '^FuzzMethodOverride$$' -fuzztime 200000x ./internal/rules
	$(GO) test -run '^$$' -fuzz '^FuzzHostKey$$' -fuzztime 200000x ./internal/rules
	$(GO) test -run '^$$' -fuzz '^FuzzStoreKeyIP$$' -fuzztime 200000x ./internal/rules
	$(GO) test -run '^$$' -fuzz '^FuzzAuthorizationKey$$' -fuzztime 200000x ./internal/rules
	$(GO) test -run '^$$' -fuzz '^FuzzStoreKeyQueryCookie$$' -fuzztime 200000x ./internal/rules
	$(GO) test -run '^$$' -fuzz '^FuzzAppend$$' -fuzztime 50000x ./internal/jsonstr
	$(GO) test -run '^$$' -fuzz '^FuzzRateLimitReset$$' -fuzztime 100000x ./httplimit
	$(GO) test -run '^$$' -fuzz '^FuzzServerWait$$' -fuzztime 100000x ./httplimit
	$(GO) test -run '^$$' -fuzz '^FuzzParseCheck$$' -fuzztime 40000x ./internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzUnreadAccount$$' -fuzztime 100000x ./internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzRequestBytes$$' -fuzztime 100000x ./internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzReadHead$$' -fuzztime 3000x ./internal/listener
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime 200000x ./internal/h1
	$(GO) test -run '^$$' -fuzz '^FuzzSimpleResponse$$' -fuzztime 100000x ./internal/proxy
	$(GO) test -run '^$$' -fuzz '^FuzzHeadNames$$' -fuzztime 100000x ./internal/proxy
	$(GO) test -run '^$$' -fuzz '^FuzzDropHTTP2Upgrade$$' -fuzztime 200000x ./internal/proxy
	$(GO) test -run '^$$' -fuzz '^FuzzForwardedValues$$' -fuzztime 200000x ./internal/proxy
	$(GO) test -run '^$$' -fuzz '^FuzzForwardedElement$$' -fuzztime 70000x ./internal/proxy
	$(GO) test -run '^$$' -fuzz '^FuzzKeyShared$$' -fuzztime 200000x ./internal/hotkeys
	$(GO) test -run '^$$' -fuzz '^FuzzCheckBody$$' -fuzztime 5000x ./internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzForwardAuth$$' -fuzztime 5000x ./internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzParseURI$$' -fuzztime 200000x ./internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzRLSCodecRequest$$' -fuzztime 100000x ./internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzShouldRateLimit$$' -fuzztime 20000x ./internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzXDSConfig$$' -fuzztime 20000x ./internal/server
	$(GO) test -run '^$$' -fuzz '^FuzzParseID$$' -fuzztime 100000x ./internal/deferq
	$(GO) test -run '^$$' -fuzz '^FuzzRefundMessage$$' -fuzztime 200000x ./redisstore
	$(GO) test -run '^$$' -fuzz '^FuzzParseVersion$$' -fuzztime 200000x ./redisstore
	cd bench && $(GO) test -run '^$$' -fuzz '^FuzzParseAnswer$$' -fuzztime 100000x ./internal/harness
	# The randomized differential tests on new seeds (make test replays
	# sluicetest.DefaultSeed); a failure logs SLUICE_SEED to replay it.
	sh scripts/ensure-redis.sh
	SLUICE_SEED=random $(GO) test -count=1 -run 'Differential|RedisEqualsMemory|RefundRestores|Conformance|ScriptTwin|FoldExact' . ./memstore ./redisstore ./fleet

bench: bench-core bench-redis bench-load bench-gateway bench-envoy bench-fleet

bench-redis:
	sh scripts/ensure-redis.sh
	cd bench/redis && $(GO) run . -d 2s

bench-core:
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -count 3 ./...

# The daemon under load: wrk against sluice serve (memory and Redis), a
# bare upstream, nginx (proxy_pass + limit_req), Caddy, a bare reverse
# proxy, a minimal fasthttp proxy and a bare JSON handler; ~4 minutes.
bench-load:
	sh scripts/ensure-redis.sh
	sh scripts/ensure-gateways.sh
	command -v wrk >/dev/null || apt-get install -y -qq wrk
	cd bench && $(GO) run ./load -d 10s -runs 2

# nginx in front of a trivial upstream (a second nginx process), with and
# without the auth_request to Sluice of examples/gateways/nginx, side by
# side; about 3 minutes.
bench-gateway:
	sh scripts/ensure-gateways.sh
	command -v wrk >/dev/null || apt-get install -y -qq wrk
	cd bench && $(GO) run ./gateway -d 10s -runs 2

# The Envoy rate limit service under gRPC load: a bare grpc-go server (the
# floor), sluice on memory and on Redis, at c=16/64/256 and 1 and 10,000
# keys; about 2 minutes. Add REFERENCE=/path/to/ratelimit (a build of
# envoyproxy/ratelimit's ./src/service_cmd) to run it beside them.
bench-envoy:
	sh scripts/ensure-redis.sh
	cd bench && $(GO) run ./grpcload -d 5s $(if $(REFERENCE),-reference $(REFERENCE))

# The fleet through the daemon: 3 sluice serve on one Redis, /v1/check
# plain vs sync: 100ms vs lease: auto, one hot key and 100,000 keys, and
# overload; then the soft bound through the daemons (sync at 10x overload
# of a per-minute rule, 10 s per run); then the same three modes on a real
# 3-node Redis Cluster (one hot key and 100,000 keys); then one hot key with
# HTTP/1.1 pipelining (16 requests in flight per connection: a different
# measurement, labelled so); then plain and sync on one hot key over loopback
# TCP and over the daemons' Unix sockets (-unix: an app beside a Sluice
# sidecar) in one run; about 5 minutes.
bench-fleet:
	sh scripts/ensure-redis.sh
	cd bench && $(GO) run ./fleetload -d 3s -runs 3
	cd bench && $(GO) run ./fleetload -cluster -d 3s -runs 2 -overload=false -bound=false
	cd bench && $(GO) run ./fleetload -pipeline 16 -keys 1 -d 3s -runs 2 -overload=false -bound=false
	cd bench && $(GO) run ./fleetload -unix -modes plain,sync -keys 1 -d 3s -runs 2 -overload=false -bound=false

clean:
	rm -f sluice
