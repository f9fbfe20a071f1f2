package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpreempt/gpreempt/tsg"
)

// ParseFile reads and parses the policy at name.
func ParseFile(name string) (*Policy, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, name, err)
	}
	p, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p.Source = name
	return p, nil
}

// Parse parses and checks a policy. Errors name the line and the field
// ("line 12: rules[2].match.uid: ...").
func Parse(b []byte) (*Policy, error) {
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxSize)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty file", ErrInvalid)
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: line %d: a second YAML document; one policy a file", ErrInvalid, more.Line)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("%w: not a YAML document", ErrInvalid)
	}
	p, err := parse(doc.Content[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return p, nil
}

// fieldErr is an error at a line about a field.
func fieldErr(n *yaml.Node, field, format string, args ...any) error {
	return fmt.Errorf("line %d: %s: %s", n.Line, field, fmt.Sprintf(format, args...))
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "value"
	case yaml.AliasNode:
		return "alias"
	}
	return "document"
}

// fields returns the values of mapping n by key, refusing keys not in
// allowed and keys given twice.
func fields(n *yaml.Node, field string, allowed ...string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, fieldErr(n, field, "want a mapping, got a %s", kindName(n.Kind))
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := join(field, k.Value)
		if k.Kind != yaml.ScalarNode {
			return nil, fieldErr(k, field, "want a field name, got a %s", kindName(k.Kind))
		}
		ok := false
		for _, a := range allowed {
			ok = ok || a == k.Value
		}
		if !ok {
			return nil, fieldErr(k, name, "unknown field (want one of %s)", strings.Join(allowed, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, fieldErr(k, name, "given twice")
		}
		out[k.Value] = v
	}
	return out, nil
}

func join(parent, field string) string {
	if parent == "" {
		return field
	}
	return parent + "." + field
}

func scalar(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", fieldErr(n, field, "want a single value, got a %s", kindName(n.Kind))
	}
	return n.Value, nil
}

// strs accepts one value or a list of values.
func strs(n *yaml.Node, field string) ([]string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		return []string{n.Value}, nil
	case yaml.SequenceNode:
		var out []string
		for i, c := range n.Content {
			v, err := scalar(c, fmt.Sprintf("%s[%d]", field, i))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		if len(out) == 0 {
			return nil, fieldErr(n, field, "empty list")
		}
		return out, nil
	}
	return nil, fieldErr(n, field, "want a value or a list of values, got a %s", kindName(n.Kind))
}

// timeslice reads a timeslice field.
func timeslice(v *yaml.Node, field string) (time.Duration, error) {
	str, err := scalar(v, field)
	if err != nil {
		return 0, err
	}
	d, err := tsg.ParseTimeslice(str)
	if err != nil {
		return 0, fieldErr(v, field, "%v", err)
	}
	return d, nil
}

// timesliceOrOff reads a timeslice, or "off" (or "never") for 0.
func timesliceOrOff(v *yaml.Node, field string) (time.Duration, error) {
	str, err := keyword(v, field)
	if err != nil {
		return 0, err
	}
	if str == "off" || str == "never" {
		return 0, nil
	}
	return timeslice(v, field)
}

// keyword reads a scalar field as a lower-case word.
func keyword(v *yaml.Node, field string) (string, error) {
	str, err := scalar(v, field)
	return strings.ToLower(strings.TrimSpace(str)), err
}

// anyKey allows every key of mapping n (for env, whose keys are names).
func anyKey(n *yaml.Node) []string {
	var ks []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		ks = append(ks, n.Content[i].Value)
	}
	return ks
}
