package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReproducible: the same inputs give the same image whatever the
// files' own times and the order they are given in, and every entry is
// root's with the image's time.
func TestReproducible(t *testing.T) {
	created := time.Unix(1764000000, 0).UTC()
	build := func(touch time.Time, reverse bool) (*Image, string) {
		dir := t.TempDir()
		base := filepath.Join(dir, "base")
		for _, f := range []string{"lib/x86_64-linux-gnu/libc.so.6", "etc/passwd"} {
			p := filepath.Join(base, f)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, touch, touch); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("/lib/x86_64-linux-gnu/libc.so.6", filepath.Join(base, "lib", "libc.so")); err != nil {
			t.Fatal(err)
		}
		bin := filepath.Join(dir, "gpreemptd")
		if err := os.WriteFile(bin, []byte("\x7fELF..."), 0o700); err != nil {
			t.Fatal(err)
		}
		ctl := filepath.Join(dir, "gpreemptctl")
		if err := os.WriteFile(ctl, []byte("\x7fELF!"), 0o700); err != nil {
			t.Fatal(err)
		}
		add := []File{{Src: bin, Dst: "/usr/bin/gpreemptd", Mode: 0o755}, {Src: ctl, Dst: "/usr/bin/gpreemptctl", Mode: 0o755}}
		if reverse {
			add[0], add[1] = add[1], add[0]
		}
		layout := filepath.Join(dir, "oci")
		img, err := Write(Options{Base: base, Add: add, Layout: layout, Archive: filepath.Join(dir, "img.tar"),
			Tag: "0.1.0", Name: "example.org/gpreemptd:0.1.0", Arch: "amd64", Entrypoint: "/usr/bin/gpreemptd", Created: created})
		if err != nil {
			t.Fatal(err)
		}
		return img, layout
	}
	a, layout := build(time.Now(), false)
	b, _ := build(time.Unix(1, 0), true)
	if a.Manifest != b.Manifest {
		t.Errorf("manifests differ: %s, %s", a.Manifest, b.Manifest)
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	readJSON(t, filepath.Join(layout, "index.json"), &index)
	if len(index.Manifests) != 1 || index.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "0.1.0" ||
		index.Manifests[0].Annotations["io.containerd.image.name"] != "example.org/gpreemptd:0.1.0" {
		t.Errorf("index %+v", index)
	}
	var names []string
	for _, l := range a.Layers {
		f, err := os.Open(filepath.Join(layout, "blobs", "sha256", l.Digest[len("sha256:"):]))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, h.Name)
			if !h.ModTime.Equal(created) || h.Uid != 0 || h.Gid != 0 {
				t.Errorf("%s: time %v, owner %d:%d", h.Name, h.ModTime, h.Uid, h.Gid)
			}
		}
		f.Close()
	}
	want := []string{"etc/", "etc/passwd", "lib/", "lib/libc.so", "lib/x86_64-linux-gnu/", "lib/x86_64-linux-gnu/libc.so.6",
		"usr/", "usr/bin/", "usr/bin/gpreemptctl", "usr/bin/gpreemptd"}
	if len(names) != len(want) {
		t.Fatalf("entries %q, want %q", names, want)
	}
	for i := range want {
		if names[i] != want[i] {
			t.Errorf("entry %d: %q, want %q", i, names[i], want[i])
		}
	}
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}
