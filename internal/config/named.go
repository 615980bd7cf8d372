package config

import (
	"os"
	"slices"

	"github.com/sluicehq/sluice/internal/yamlnode"
)

func newDecoder(file string) *decoder {
	return &decoder{Walker: yamlnode.NewWalker(file, "config", maxNodes), lookup: os.LookupEnv, lines: map[string]int{}, expanded: map[string]string{}}
}

// NamedFiles returns the files besides itself that the config in data
// (the contents of the config file named file) names and that a reload
// reads: the listeners' certificates, keys and client CAs, api.token_file,
// grpc.config's descriptor files and directories and grpc.xds.tls's
// files, their paths
// resolved as Parse resolves them. It reads what decodes of a config that
// Parse refuses, such as one naming a file that is missing; nil when data
// is not YAML or too large.
func NamedFiles(file string, data []byte) []string {
	if len(data) > MaxConfigBytes {
		return nil
	}
	root, err := parseYAML(file, data)
	if err != nil {
		return nil
	}
	d := newDecoder(file)
	d.Own(root)
	c := &Config{File: file}
	if !d.config(root, c) {
		return nil
	}
	c.applyDefaults()
	var paths []string
	tls := func(t *TLSConfig) {
		if t != nil {
			paths = append(paths, t.Cert, t.Key, t.ClientCA)
		}
	}
	tls(c.API.TLS)
	if c.Proxy != nil {
		tls(c.Proxy.TLS)
	}
	if c.GRPC != nil {
		tls(c.GRPC.TLS)
		paths = append(paths, c.GRPC.Config...)
		if x := c.GRPC.XDS; x != nil && x.TLS != nil {
			paths = append(paths, x.TLS.CA, x.TLS.Cert, x.TLS.Key)
		}
	}
	paths = append(paths, c.API.TokenFile)
	return slices.DeleteFunc(paths, func(p string) bool { return p == "" })
}
