// Package gpreemptpy embeds the Python wrapper of libgpreempt, so that
// gpreempt-bench can hand it to its PyTorch workers from the binary alone.
package gpreemptpy

import _ "embed"

// Init is python/gpreempt/__init__.py.
//
//go:embed __init__.py
var Init []byte
