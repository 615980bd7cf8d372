// Package gatewaytest holds the end-to-end tests of the gateway configs in
// examples/gateways: real nginx and Caddy processes, started on free
// loopback ports with those configs, in front of a real Sluice daemon
// (and a real Redis when two daemons share a count), and a test that sends
// /v1/forward-auth what Traefik's ForwardAuth middleware sends. With the
// build tag traefik (`TRAEFIK=/path/to/traefik make check-traefik`, not
// part of `make test`), traefik_real_test.go runs the Traefik example with
// a real Traefik and checks the emulation against it.
//
// nginx and caddy are found on PATH; when either is missing or does not
// start, the tests fail (never skip): `make test` installs both with
// scripts/ensure-gateways.sh.
package gatewaytest
