package config

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/sluicehq/sluice/internal/server"
)

// APIConfig is the client side of Listen (the decision API, /metrics,
// /healthz, /readyz).
type APIConfig struct {
	Listener `yaml:",inline"`
	// TokenFile, if set, names a file holding a bearer token: /v1/* and
	// /json then require Authorization: Bearer <token>. Resolved against
	// the config file's directory; read again on every reload.
	TokenFile string `yaml:"token_file"`
}

// MaxTokenBytes bounds a token file: it holds one bearer token.
const MaxTokenBytes = 64 << 10

// ReadToken reads a token file: its content without surrounding white
// space, which must not be empty nor hold a control character (a line
// break: no header could carry it), but a tab. It reads at most MaxTokenBytes (and one
// more byte, to tell): a larger file is an error.
func ReadToken(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxTokenBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxTokenBytes {
		return nil, fmt.Errorf("larger than %d bytes: a token file holds one bearer token", MaxTokenBytes)
	}
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return nil, errEmptyToken
	}
	if i := bytes.IndexFunc(b, func(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }); i >= 0 {
		// No header can carry it: every client would get 401.
		return nil, fmt.Errorf("the token holds a control character (%q at byte %d: a second line?), which no Authorization header can carry: put the token alone in the file", b[i], i)
	}
	return b, nil
}

func (a *APIConfig) defaults(file string) {
	a.Listener.defaults(file)
	resolvePath(file, &a.TokenFile)
}

func (a *APIConfig) check(ck *checker, block string) {
	a.Listener.check(ck, block)
	if a.TokenFile != "" {
		n := len(ck.errs)
		ck.secretFile(block+".token_file", a.TokenFile, "the token")
		if len(ck.errs) == n {
			if _, err := ReadToken(a.TokenFile); err != nil {
				ck.fail(block+".token_file", "%s: %v", a.TokenFile, err)
			}
		}
	}
}

var errEmptyToken = errorString("the token file is empty: put the bearer token in it")

type errorString string

func (e errorString) Error() string { return string(e) }

// ForwardAuthConfig is the /v1/forward-auth endpoint.
type ForwardAuthConfig struct {
	// DenyStatus is the status of a limited answer, 400–599. Default
	// server.DefaultDenyStatus, 429 (use 403 for nginx auth_request, which
	// treats 429 as an error).
	DenyStatus int `yaml:"deny_status"`
}

func (f *ForwardAuthConfig) defaults() { setDefault(&f.DenyStatus, server.DefaultDenyStatus) }

func (f *ForwardAuthConfig) check(ck *checker) {
	if st := f.DenyStatus; st < 400 || st > 599 {
		ck.fail("forward_auth.deny_status", "%d is not a 4xx or 5xx status", st)
	}
}

// LimitsConfig bounds what the daemon accepts.
type LimitsConfig struct {
	// MaxBodyBytes bounds a decision API request body. Default
	// server.DefaultMaxBodyBytes (65536).
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
}

func (l *LimitsConfig) defaults() { setDefault(&l.MaxBodyBytes, server.DefaultMaxBodyBytes) }

func (l *LimitsConfig) check(ck *checker) {
	if b := l.MaxBodyBytes; b < 1 || b > 64<<20 {
		ck.fail("limits.max_body_bytes", "%d must be between 1 and %d", b, 64<<20)
	}
}
