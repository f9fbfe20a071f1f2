// Command helmtemplate renders the gpreempt chart (deploy/helm/gpreempt) to
// plain manifests the way `helm template` does, for deploy/kubernetes/.
//
// Helm's engine is Go's text/template with sprig's functions and include.
// Helm itself is not among this module's dependencies (helm v4 needs a
// newer client-go than gpreempt builds with, and the build is heavy), so
// this renders the chart with text/template and the few functions its
// templates use, each implemented as Helm does. The chart keeps to those
// functions; a template using another fails here, loudly.
//
//	go run ./hack/helmtemplate -chart deploy/helm/gpreempt -namespace gpreempt -set createNamespace=true > deploy/kubernetes/gpreempt.yaml
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"
)

type setFlags []string

func (s *setFlags) String() string     { return strings.Join(*s, ",") }
func (s *setFlags) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	chart := flag.String("chart", "deploy/helm/gpreempt", "chart directory")
	release := flag.String("release", "gpreempt", "release name")
	namespace := flag.String("namespace", "gpreempt", "release namespace")
	var sets setFlags
	flag.Var(&sets, "set", "KEY=VALUE to override in values.yaml (dotted key; true, false and numbers are typed); repeatable")
	flag.Parse()
	out, err := Render(*chart, *release, *namespace, sets)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helmtemplate:", err)
		os.Exit(1)
	}
	os.Stdout.Write(out)
}

// Render renders every template of the chart at dir, in file name order,
// as `helm template` prints them: each document headed by its source.
func Render(dir, release, namespace string, sets []string) ([]byte, error) {
	var chart map[string]any
	if err := readYAML(filepath.Join(dir, "Chart.yaml"), &chart); err != nil {
		return nil, err
	}
	var values map[string]any
	if err := readYAML(filepath.Join(dir, "values.yaml"), &values); err != nil {
		return nil, err
	}
	for _, s := range sets {
		if err := setValue(values, s); err != nil {
			return nil, err
		}
	}
	data := map[string]any{
		"Values":  values,
		"Release": map[string]any{"Name": release, "Namespace": namespace, "Service": "Helm"},
		"Chart":   map[string]any{"Name": chart["name"], "Version": chart["version"], "AppVersion": chart["appVersion"]},
	}
	tmpl := template.New("chart").Option("missingkey=zero")
	tmpl.Funcs(funcs(tmpl))
	files, err := filepath.Glob(filepath.Join(dir, "templates", "*"))
	if err != nil {
		return nil, err
	}
	slices.Sort(files)
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		name := filepath.Join(filepath.Base(dir), "templates", filepath.Base(f))
		if _, err := tmpl.New(name).Parse(string(b)); err != nil {
			return nil, err
		}
		if !strings.HasPrefix(filepath.Base(f), "_") {
			names = append(names, name)
		}
	}
	type rendered struct {
		source, body string
		order        int
	}
	var docs []rendered
	for _, name := range names {
		var buf bytes.Buffer
		if err := tmpl.ExecuteTemplate(&buf, name, data); err != nil {
			return nil, err
		}
		for _, doc := range strings.Split(buf.String(), "\n---") {
			doc = strings.TrimSpace(strings.TrimPrefix(doc, "---"))
			if doc == "" || strings.Trim(doc, "-\n ") == "" {
				continue
			}
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				return nil, fmt.Errorf("%s: rendered invalid YAML: %w\n%s", name, err, doc)
			}
			order := slices.Index(installOrder, meta.Kind)
			if order < 0 {
				order = len(installOrder)
			}
			docs = append(docs, rendered{name, doc, order})
		}
	}
	// Helm installs, and prints, objects by kind: a Namespace before what
	// lives in it, RBAC before the workload. kubectl apply -f keeps file
	// order, so the plain manifests are written in the same order.
	slices.SortStableFunc(docs, func(a, b rendered) int { return a.order - b.order })
	var out bytes.Buffer
	for _, d := range docs {
		fmt.Fprintf(&out, "---\n# Source: %s\n%s\n", d.source, d.body)
	}
	return out.Bytes(), nil
}

// installOrder is Helm's (pkg/release/util/kind_sorter.go), for the kinds
// the chart renders.
var installOrder = []string{"Namespace", "ServiceAccount", "ConfigMap", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "DaemonSet", "ServiceMonitor"}

func readYAML(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

func setValue(values map[string]any, kv string) error {
	k, v, ok := strings.Cut(kv, "=")
	if !ok {
		return fmt.Errorf("--set %q: want KEY=VALUE", kv)
	}
	var val any = v
	if list, ok := strings.CutPrefix(v, "{"); ok && strings.HasSuffix(list, "}") {
		// Helm's list syntax: KEY={a,b}.
		var items []any
		for _, item := range strings.Split(strings.TrimSuffix(list, "}"), ",") {
			if item != "" {
				items = append(items, item)
			}
		}
		val = items
	} else if b, err := strconv.ParseBool(v); err == nil {
		val = b
	} else if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		val = n
	}
	keys := strings.Split(k, ".")
	m := values
	for _, key := range keys[:len(keys)-1] {
		next, ok := m[key].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[key] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = val
	return nil
}

// funcs are the sprig and Helm functions the chart uses, with Helm's
// semantics.
func funcs(t *template.Template) template.FuncMap {
	return template.FuncMap{
		"include": func(name string, data any) (string, error) {
			var buf bytes.Buffer
			err := t.ExecuteTemplate(&buf, name, data)
			return buf.String(), err
		},
		// Helm's toYaml: sigs.k8s.io/yaml, without the trailing newline.
		"toYaml": func(v any) (string, error) {
			b, err := yaml.Marshal(v)
			return strings.TrimSuffix(string(b), "\n"), err
		},
		"indent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
		},
		"nindent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			return "\n" + pad + strings.ReplaceAll(s, "\n", "\n"+pad)
		},
		"quote": func(v any) string { return strconv.Quote(fmt.Sprint(v)) },
		"base":  path.Base,  // sprig's
		"isAbs": path.IsAbs, // sprig's
		"fail":  func(msg string) (string, error) { return "", errors.New(msg) },
		"default": func(def, v any) any {
			if v == nil || v == "" || v == false || v == 0 {
				return def
			}
			return v
		},
		"trunc": func(n int, s string) string {
			if len(s) > n {
				return s[:n]
			}
			return s
		},
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"contains":   func(sub, s string) bool { return strings.Contains(s, sub) },
		"sha256sum": func(s string) string {
			h := sha256.Sum256([]byte(s))
			return hex.EncodeToString(h[:])
		},
		"required": func(msg string, v any) (any, error) {
			if v == nil || v == "" {
				return nil, errors.New(msg)
			}
			return v, nil
		},
	}
}
