//go:build tools

// Package deps pins the project's chosen dependencies in go.mod while the
// packages that use them are being written. Removed once they are all used.
package deps

import (
	_ "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	_ "github.com/fsnotify/fsnotify"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/redis/rueidis"
	_ "go.yaml.in/yaml/v3"
	_ "google.golang.org/grpc"
)
