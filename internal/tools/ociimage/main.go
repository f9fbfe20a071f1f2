// Command ociimage writes an OCI image, layout and archive, from a base
// root file system and files to add on top: `make image` builds gpreemptd's
// DaemonSet image with it, without a container daemon.
//
// The output depends only on its inputs: entries sorted by path, owned by
// root, every time set to -epoch (SOURCE_DATE_EPOCH), gzip without a name
// or time, JSON with sorted keys. The same tree built with the same Go
// toolchain and the same Debian packages gives the same digest.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

func main() {
	var o Options
	var adds, labels, annotations, env multi
	var epoch string
	flag.StringVar(&o.Base, "base", "", "directory: the base layer's root file system")
	flag.StringVar(&o.BaseHistory, "base-history", "", "what made the base layer (the image's history)")
	flag.Var(&adds, "add", "SRC:DST:MODE: a file of the top layer (octal mode); repeatable")
	flag.StringVar(&o.AppHistory, "app-history", "", "what made the top layer")
	flag.StringVar(&o.Layout, "layout", "", "write the OCI image layout into this directory")
	flag.StringVar(&o.Archive, "archive", "", "and the layout as one tar (oci-archive) into this file")
	flag.StringVar(&o.Tag, "tag", "", "the tag (org.opencontainers.image.ref.name)")
	flag.StringVar(&o.Name, "name", "", "the image's full name, REPOSITORY:TAG (io.containerd.image.name, used by ctr image import)")
	flag.StringVar(&o.Arch, "arch", "amd64", "the image's architecture")
	flag.Var(&env, "env", "NAME=VALUE of the image's environment; repeatable")
	flag.Var(&labels, "label", "KEY=VALUE of the image's config; repeatable")
	flag.Var(&annotations, "annotation", "KEY=VALUE of the manifest; repeatable")
	flag.StringVar(&o.Entrypoint, "entrypoint", "", "the image's entrypoint (one path)")
	flag.StringVar(&epoch, "epoch", os.Getenv("SOURCE_DATE_EPOCH"), "every time in the image, in seconds since 1970 (default $SOURCE_DATE_EPOCH)")
	flag.Parse()
	if err := run(&o, adds, labels, annotations, env, epoch); err != nil {
		fmt.Fprintf(os.Stderr, "ociimage: %v\n", err)
		os.Exit(1)
	}
}

func run(o *Options, adds, labels, annotations, env multi, epoch string) error {
	if o.Base == "" || o.Layout == "" || o.Tag == "" {
		return fmt.Errorf("-base, -layout and -tag are needed")
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return fmt.Errorf("-epoch %q: want seconds since 1970 (set SOURCE_DATE_EPOCH)", epoch)
	}
	o.Created = time.Unix(secs, 0).UTC()
	for _, a := range adds {
		parts := strings.Split(a, ":")
		if len(parts) != 3 {
			return fmt.Errorf("-add %q: want SRC:DST:MODE", a)
		}
		mode, err := strconv.ParseUint(parts[2], 8, 32)
		if err != nil {
			return fmt.Errorf("-add %q: mode: %w", a, err)
		}
		o.Add = append(o.Add, File{Src: parts[0], Dst: parts[1], Mode: os.FileMode(mode)})
	}
	if o.Labels, err = keyValues(labels); err != nil {
		return err
	}
	if o.Annotations, err = keyValues(annotations); err != nil {
		return err
	}
	o.Env = env
	img, err := Write(*o)
	if err != nil {
		return err
	}
	fmt.Printf("image %s: manifest %s\n", o.Tag, img.Manifest)
	for i, l := range img.Layers {
		fmt.Printf("layer %d: %s, %d bytes compressed, %d uncompressed, %d entries (%s)\n", i+1, l.Digest, l.Size, l.Uncompressed, l.Entries, l.History)
	}
	if o.Archive != "" {
		st, err := os.Stat(o.Archive)
		if err != nil {
			return err
		}
		fmt.Printf("archive %s: %d bytes\n", o.Archive, st.Size())
	}
	return nil
}

func keyValues(kvs []string) (map[string]string, error) {
	m := map[string]string{}
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%q: want KEY=VALUE", kv)
		}
		m[k] = v
	}
	return m, nil
}
