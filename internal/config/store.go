package config

import (
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/engine"
	"github.com/sluicehq/sluice/redisstore"
)

// StoreConfig selects where counters live.
type StoreConfig struct {
	Type  string      `yaml:"type"` // "memory" (default) or "redis"
	Redis RedisConfig `yaml:"redis"`
	// OnError is what happens when the store cannot decide: "allow"
	// (default, fail open), "deny" (fail closed, 503) or "local" (an
	// in-memory limit of rate/ExpectedInstances).
	OnError string `yaml:"on_error"`
	// ExpectedInstances is how many daemons share the Redis store; used by
	// on_error: local. Default 1.
	ExpectedInstances int `yaml:"expected_instances"`
	// MaxKeys caps the keys the memory store holds; 0 means the memstore
	// default.
	MaxKeys int `yaml:"max_keys"`
}

// RedisConfig is the Redis (or Redis Cluster, or Sentinel) store.
type RedisConfig struct {
	// Addrs are host:port; required for type redis. Several need Cluster,
	// or Sentinel (they are then the Sentinels).
	Addrs   []string `yaml:"addrs"`
	Cluster bool     `yaml:"cluster"` // Redis Cluster
	// Sentinel, if set, is the master set name monitored by the Sentinels
	// at Addrs; failovers are followed.
	Sentinel string `yaml:"sentinel"`
	// Timeout bounds every call to Redis. Default redisstore.DefaultTimeout
	// (50ms).
	Timeout  time.Duration `yaml:"timeout"`
	Username string        `yaml:"username"`
	Password string        `yaml:"password"` // use ${ENV} rather than writing it in the file
	// SentinelUsername and SentinelPassword are what the Sentinels get
	// when they require credentials other than the master's; left out,
	// they get Username and Password.
	SentinelUsername string `yaml:"sentinel_username"`
	SentinelPassword string `yaml:"sentinel_password"`
	DB               int    `yaml:"db"` // database number; must be 0 with Cluster
	// TLS is tls: true (the system's CA roots), false, or a mapping of
	// files (RedisTLS), which turns TLS on.
	TLS RedisTLS `yaml:"tls"`
	// KeyPrefix is prepended to every key. Default redisstore.DefaultPrefix
	// ("sluice:").
	KeyPrefix string `yaml:"key_prefix"`
	// MaxFlushDelay lets the Redis client gather the calls of concurrent
	// requests into one write for up to this long (0 to 1ms): less CPU
	// per decision under load, for at most this much latency. Default 0
	// (write at once).
	MaxFlushDelay time.Duration `yaml:"max_flush_delay"`
}

// SentinelCredentials are what the Sentinels get (redisstore.Options'
// field of the name): nil, for the master's, unless sentinel_username or
// sentinel_password is set.
func (r *RedisConfig) SentinelCredentials() *redisstore.Credentials {
	if r.SentinelUsername == "" && r.SentinelPassword == "" {
		return nil
	}
	return &redisstore.Credentials{Username: r.SentinelUsername, Password: r.SentinelPassword}
}

// DBProblem returns why db is not a Redis database number ("-1 is not a
// database number"), or "": store.redis.db's check, which sluice simulate's
// -redis-db shares. Redis's databases setting bounds the numbers further,
// as the store connects.
func DBProblem(db int) string {
	if db < 0 || db > 1<<20 {
		return strconv.Itoa(db) + " is not a database number"
	}
	return ""
}

// The store types.
const (
	StoreMemory = "memory"
	StoreRedis  = "redis"
)

func (s *StoreConfig) defaults(file string) {
	setDefault(&s.Type, StoreMemory)
	setDefault(&s.OnError, engine.OnErrorAllow)
	if s.Type == StoreRedis {
		setDefault(&s.Redis.Timeout, redisstore.DefaultTimeout)
		setDefault(&s.Redis.KeyPrefix, redisstore.DefaultPrefix)
	}
	resolvePath(file, &s.Redis.TLS.CA)
	resolvePath(file, &s.Redis.TLS.Cert)
	resolvePath(file, &s.Redis.TLS.Key)
	setDefault(&s.ExpectedInstances, 1)
}

func (s *StoreConfig) check(ck *checker) {
	redis := s.Type == StoreRedis
	switch s.Type {
	case StoreMemory:
		if !s.Redis.zero() {
			ck.fail("store.redis", "set, but store.type is memory: add type: redis, or remove the redis block")
		}
	case StoreRedis:
		s.Redis.check(ck)
	default:
		ck.fail("store.type", "unknown store %q (want memory or redis)", s.Type)
	}
	switch s.OnError {
	case engine.OnErrorAllow, engine.OnErrorDeny:
	case engine.OnErrorLocal:
		if !redis {
			ck.fail("store.on_error", "local falls back from Redis to memory: it needs store.type: redis")
		}
	default:
		ck.fail("store.on_error", "unknown policy %q (want allow, deny or local)", s.OnError)
	}
	if s.ExpectedInstances < 1 || s.ExpectedInstances > 100_000 {
		ck.fail("store.expected_instances", "%d must be between 1 and 100000", s.ExpectedInstances)
	}
	if s.MaxKeys < 0 {
		ck.fail("store.max_keys", "%d must not be negative", s.MaxKeys)
	}
}

func (r *RedisConfig) check(ck *checker) {
	if len(r.Addrs) == 0 {
		ck.fail("store.redis.addrs", "missing: the Redis store needs at least one address, such as [127.0.0.1:6379]")
	}
	for i, a := range r.Addrs {
		key := "store.redis.addrs[" + strconv.Itoa(i) + "]"
		if strings.Contains(a, "://") {
			// A REDIS_URL: its parts have keys of their own.
			ck.fail(key, "%q: want host:port, not a URL: its user and password go in store.redis.username and password, rediss:// is tls: true", redact(a))
			continue
		}
		ck.addr(key, a)
	}
	if len(r.Addrs) > 1 && !r.Cluster && r.Sentinel == "" {
		ck.fail("store.redis.addrs", "%d addresses without cluster: true (one address for a single Redis, several for Redis Cluster)", len(r.Addrs))
	}
	if r.Sentinel != "" && r.Cluster {
		ck.fail("store.redis.sentinel", "set with cluster: true: Sentinel watches one master, Cluster shards over many; keep one")
	}
	if r.Sentinel == "" {
		if r.SentinelUsername != "" {
			ck.fail("store.redis.sentinel_username", "set without store.redis.sentinel: only Sentinels get it")
		}
		if r.SentinelPassword != "" {
			ck.fail("store.redis.sentinel_password", "set without store.redis.sentinel: only Sentinels get it")
		}
	} else if r.SentinelUsername != "" && r.SentinelPassword == "" {
		ck.fail("store.redis.sentinel_username", "set without store.redis.sentinel_password: a user logs in with its password")
	}
	ck.between("store.redis.timeout", r.Timeout, time.Millisecond, time.Minute)
	if r.MaxFlushDelay < 0 || r.MaxFlushDelay > time.Millisecond {
		ck.fail("store.redis.max_flush_delay", "%v must be between 0 and 1ms", r.MaxFlushDelay)
	}
	if p := DBProblem(r.DB); p != "" {
		ck.fail("store.redis.db", "%s", p)
	} else if r.DB != 0 && r.Cluster {
		ck.fail("store.redis.db", "Redis Cluster has database 0 only")
	}
	if len(r.KeyPrefix) > 64 {
		ck.fail("store.redis.key_prefix", "longer than 64 bytes")
	} else if strings.ContainsAny(r.KeyPrefix, "{}") {
		ck.fail("store.redis.key_prefix", "%q: must not contain { or } (they would change the Cluster hash tag)", r.KeyPrefix)
	}
	r.TLS.check(ck)
}

func (r *RedisConfig) zero() bool {
	return len(r.Addrs) == 0 && !r.Cluster && r.Sentinel == "" && r.Timeout == 0 && r.Username == "" &&
		r.Password == "" && r.SentinelUsername == "" && r.SentinelPassword == "" && r.DB == 0 && r.TLS == (RedisTLS{}) && r.KeyPrefix == "" && r.MaxFlushDelay == 0
}
