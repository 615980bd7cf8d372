package config

import (
	"bytes"
	"errors"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sluicehq/sluice/internal/rules"
	"github.com/sluicehq/sluice/internal/yamlnode"
)

// parseYAML reads the single document of data.
func parseYAML(file string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{File: file, Line: 1, Msg: "empty config: want a mapping such as listen: 127.0.0.1:8080"}}
		}
		return nil, Errors{yamlError(file, data, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, Errors{{File: file, Line: extra.Line, Msg: "more than one YAML document (---): a config is one document"}}
	} else if !errors.Is(err, io.EOF) {
		return nil, Errors{yamlError(file, data, err)}
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0], nil
	}
	return &doc, nil
}

// yamlError turns a YAML syntax error into a ParseError with its line.
func yamlError(file string, data []byte, err error) *rules.ParseError {
	line, msg := yamlnode.Syntax(data, err)
	switch {
	case strings.HasPrefix(msg, "did not find expected ',' or") && strings.Contains(lineText(data, line), "${"):
		msg += `: a value holding ${…} inside [ ] or { } must be quoted, as in key: ["header:${VAR}"]`
	case msg == "did not find expected key" || msg == "did not find expected '-' indicator":
		// The line is where the enclosing block starts, not the culprit.
		msg += " in the block that starts here: check the indentation of the lines below it"
	}
	return &rules.ParseError{File: file, Line: line, Msg: "YAML syntax: " + msg}
}

// lineText returns line n (from 1) of data, or "".
func lineText(data []byte, n int) string {
	for i := 1; len(data) > 0; i++ {
		l, rest, _ := bytes.Cut(data, []byte("\n"))
		if i == n {
			return string(l)
		}
		data = rest
	}
	return ""
}
