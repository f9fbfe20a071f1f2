package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Options say what image to write.
type Options struct {
	// Base is the root file system of the first layer.
	Base        string
	BaseHistory string
	// Add are the files of the second layer.
	Add        []File
	AppHistory string
	// Layout is the OCI layout's directory; Archive, if set, gets the
	// same as one tar.
	Layout, Archive string
	Tag, Name       string
	Arch            string
	Env             []string
	Entrypoint      string
	Labels          map[string]string
	Annotations     map[string]string
	// Created is every time the image holds.
	Created time.Time
}

// File is one file of the top layer.
type File struct {
	Src, Dst string
	Mode     os.FileMode
}

// Layer is what was written of one layer.
type Layer struct {
	Digest       string
	Size         int64
	DiffID       string
	Uncompressed int64
	Entries      int
	History      string
}

// Image is what was written.
type Image struct {
	Manifest string
	Layers   []Layer
}

const (
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

// Write writes the image's blobs, manifest, index and oci-layout into
// o.Layout (emptied first), and the archive if asked.
func Write(o Options) (*Image, error) {
	if err := os.RemoveAll(o.Layout); err != nil {
		return nil, err
	}
	blobs := filepath.Join(o.Layout, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	put := func(b []byte) (string, error) {
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		return "sha256:" + h, os.WriteFile(filepath.Join(blobs, h), b, 0o644)
	}
	base, err := layerOf(func(tw *tarWriter) error { return tw.addTree(o.Base) }, o.Created)
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	app, err := layerOf(func(tw *tarWriter) error { return tw.addFiles(o.Add) }, o.Created)
	if err != nil {
		return nil, fmt.Errorf("top layer: %w", err)
	}
	img := &Image{}
	var layers []descriptor
	var diffIDs []string
	for i, l := range []*builtLayer{base, app} {
		d, err := put(l.gz)
		if err != nil {
			return nil, err
		}
		layers = append(layers, descriptor{MediaType: mediaLayer, Digest: d, Size: int64(len(l.gz))})
		diffIDs = append(diffIDs, l.diffID)
		hist := []string{o.BaseHistory, o.AppHistory}[i]
		img.Layers = append(img.Layers, Layer{Digest: d, Size: int64(len(l.gz)), DiffID: l.diffID, Uncompressed: l.size, Entries: l.entries, History: hist})
	}
	created := o.Created.Format(time.RFC3339)
	var entrypoint []string
	if o.Entrypoint != "" {
		entrypoint = []string{o.Entrypoint}
	}
	config := map[string]any{
		"created":      created,
		"architecture": o.Arch,
		"os":           "linux",
		"config": map[string]any{
			"User":       "0:0",
			"Env":        o.Env,
			"Entrypoint": entrypoint,
			"WorkingDir": "/",
			"Labels":     o.Labels,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs},
		"history": []map[string]any{
			{"created": created, "created_by": o.BaseHistory},
			{"created": created, "created_by": o.AppHistory},
		},
	}
	cb, err := json.Marshal(config)
	if err != nil {
		return nil, err
	}
	cd, err := put(cb)
	if err != nil {
		return nil, err
	}
	annotations := map[string]string{"org.opencontainers.image.created": created}
	for k, v := range o.Annotations {
		annotations[k] = v
	}
	manifest := map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        descriptor{MediaType: mediaConfig, Digest: cd, Size: int64(len(cb))},
		"layers":        layers,
		"annotations":   annotations,
	}
	mb, err := json.Marshal(manifest)
	if err != nil {
		return nil, err
	}
	md, err := put(mb)
	if err != nil {
		return nil, err
	}
	img.Manifest = md
	ref := map[string]string{"org.opencontainers.image.ref.name": o.Tag}
	if o.Name != "" {
		ref["io.containerd.image.name"] = o.Name
	}
	index := map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaIndex,
		"manifests": []descriptor{{MediaType: mediaManifest, Digest: md, Size: int64(len(mb)),
			Platform: &platform{Architecture: o.Arch, OS: "linux"}, Annotations: ref}},
	}
	ib, err := json.Marshal(index)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Layout, "index.json"), ib, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(o.Layout, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		return nil, err
	}
	if o.Archive != "" {
		if err := writeArchive(o.Layout, o.Archive, o.Created); err != nil {
			return nil, fmt.Errorf("archive: %w", err)
		}
	}
	return img, nil
}

type builtLayer struct {
	gz      []byte
	diffID  string
	size    int64
	entries int
}

// layerOf is the gzip-compressed tar that fill writes.
func layerOf(fill func(*tarWriter) error, created time.Time) (*builtLayer, error) {
	var raw bytes.Buffer
	tw := &tarWriter{w: tar.NewWriter(&raw), created: created}
	if err := fill(tw); err != nil {
		return nil, err
	}
	if err := tw.w.Close(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw.Bytes())
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression) // no name, no time
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return &builtLayer{gz: gz.Bytes(), diffID: "sha256:" + hex.EncodeToString(sum[:]), size: int64(raw.Len()), entries: tw.entries}, nil
}

// tarWriter writes entries owned by root, with every time set to created.
type tarWriter struct {
	w       *tar.Writer
	created time.Time
	entries int
	dirs    map[string]bool
}

// tarMode is the tar mode bits of m: permissions and the sticky bit.
func tarMode(m os.FileMode) os.FileMode {
	out := m.Perm()
	if m&fs.ModeSticky != 0 {
		out |= 0o1000
	}
	return out
}

func (t *tarWriter) entry(name string, typ byte, mode os.FileMode, body io.Reader, size int64, link string) error {
	t.entries++
	h := &tar.Header{
		Typeflag: typ, Name: name, Linkname: link, Size: size, Mode: int64(tarMode(mode)),
		ModTime: t.created, Format: tar.FormatPAX,
	}
	if err := t.w.WriteHeader(h); err != nil {
		return err
	}
	if body != nil {
		n, err := io.Copy(t.w, body)
		if err == nil && n != size {
			err = fmt.Errorf("%s: %d bytes, want %d", name, n, size)
		}
		return err
	}
	return nil
}

// addTree adds every file under root, in path order.
func (t *tarWriter) addTree(root string) error {
	var paths []string
	if err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != root {
			paths = append(paths, p)
		}
		return nil
	}); err != nil {
		return err
	}
	sort.Strings(paths)
	for _, p := range paths {
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case st.IsDir():
			err = t.entry(name+"/", tar.TypeDir, st.Mode(), nil, 0, "")
		case st.Mode()&fs.ModeSymlink != 0:
			var link string
			if link, err = os.Readlink(p); err == nil {
				err = t.entry(name, tar.TypeSymlink, 0o777, nil, 0, link)
			}
		case st.Mode().IsRegular():
			err = t.addFile(p, name, st.Mode())
		default:
			err = fmt.Errorf("%s: not a file, directory or symlink", p)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (t *tarWriter) addFile(src, name string, mode os.FileMode) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	return t.entry(name, tar.TypeReg, mode, f, st.Size(), "")
}

// addFiles adds fs at their destinations, with the directories above them
// (0755), in path order.
func (t *tarWriter) addFiles(files []File) error {
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Dst < sorted[j].Dst })
	t.dirs = map[string]bool{}
	for _, f := range sorted {
		name := strings.TrimPrefix(path.Clean("/"+f.Dst), "/")
		if err := t.parents(path.Dir(name)); err != nil {
			return err
		}
		if err := t.addFile(f.Src, name, f.Mode); err != nil {
			return err
		}
	}
	return nil
}

func (t *tarWriter) parents(dir string) error {
	if dir == "." || dir == "/" || t.dirs[dir] {
		return nil
	}
	if err := t.parents(path.Dir(dir)); err != nil {
		return err
	}
	t.dirs[dir] = true
	return t.entry(dir+"/", tar.TypeDir, 0o755, nil, 0, "")
}

// writeArchive writes the layout as one tar: oci-layout and index.json
// first, then the blobs in digest order.
func writeArchive(layout, archive string, created time.Time) error {
	var names []string
	if err := filepath.WalkDir(layout, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == layout {
			return err
		}
		rel, err := filepath.Rel(layout, p)
		names = append(names, filepath.ToSlash(rel))
		return err
	}); err != nil {
		return err
	}
	sort.Strings(names)
	f, err := os.Create(archive)
	if err != nil {
		return err
	}
	tw := &tarWriter{w: tar.NewWriter(f), created: created}
	for _, n := range names {
		p := filepath.Join(layout, filepath.FromSlash(n))
		st, err := os.Stat(p)
		if err != nil {
			f.Close()
			return err
		}
		if st.IsDir() {
			err = tw.entry(n+"/", tar.TypeDir, 0o755, nil, 0, "")
		} else {
			err = tw.addFile(p, n, 0o644)
		}
		if err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.w.Close(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
