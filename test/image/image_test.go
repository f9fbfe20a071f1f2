// Package image tests gpreemptd's OCI image (make image) the way a node
// runs it: unpacked, and its gpreemptd run from the unpacked root.
//
// make test builds the image and points GPREEMPT_IMAGE at its archive
// (IMAGE_TEST=0 leaves it out); run alone:
//
//	make image && GPREEMPT_IMAGE=bin/image/gpreemptd-0.1.0.oci.tar go test ./test/image/
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpreempt/gpreempt/internal/version"
)

const repoRoot = "../.."

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

func TestImage(t *testing.T) {
	archive := os.Getenv("GPREEMPT_IMAGE")
	if archive == "" {
		t.Skip("GPREEMPT_IMAGE unset: make test builds the image (make image) and sets it; IMAGE_TEST=0 leaves it out")
	}
	if os.Geteuid() != 0 {
		t.Skip("running the image's gpreemptd needs chroot, so root")
	}
	if !filepath.IsAbs(archive) {
		archive = filepath.Join(repoRoot, archive)
	}
	layout := t.TempDir()
	untar(t, archive, layout)

	// The chart's default image is this one: its tag is the chart's
	// appVersion, its name the values' repository with that tag.
	var index struct{ Manifests []descriptor }
	readJSON(t, filepath.Join(layout, "index.json"), &index)
	if len(index.Manifests) != 1 {
		t.Fatalf("index has %d manifests, want 1", len(index.Manifests))
	}
	m := index.Manifests[0]
	appVersion, repo := chartImage(t)
	if tag := m.Annotations["org.opencontainers.image.ref.name"]; tag != appVersion || tag != version.Release() {
		t.Errorf("image tag %q; the chart's appVersion is %q, the release %q", tag, appVersion, version.Release())
	}
	if name := m.Annotations["io.containerd.image.name"]; name != repo+":"+appVersion {
		t.Errorf("image name %q, want the chart's default %s:%s", name, repo, appVersion)
	}

	// skopeo, where installed, reads the archive as a registry push would.
	if skopeo, err := exec.LookPath("skopeo"); err == nil {
		out, err := exec.Command(skopeo, "inspect", "oci-archive:"+archive).Output()
		if err != nil {
			t.Fatalf("skopeo inspect: %v", err)
		}
		var got struct{ Digest string }
		if err := json.Unmarshal(out, &got); err != nil || got.Digest != m.Digest {
			t.Errorf("skopeo reads digest %q (%v), index says %s", got.Digest, err, m.Digest)
		}
	} else {
		t.Log("skopeo not installed (make deps installs it): the archive is not read by it")
	}

	root := unpack(t, layout, m)

	// What the DaemonSet runs: gpreemptd with the chart's policy.
	run := func(args ...string) (string, int) {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/bin:/bin"}
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return string(out), 0
		case errors.As(err, &exit):
			return string(out), exit.ExitCode()
		}
		t.Fatalf("%v: %v: %s", args, err, out)
		return "", 0
	}
	out, code := run("/usr/bin/gpreemptd", "--version")
	if want := "gpreemptd version " + version.Release() + " (revision "; code != 0 || !strings.HasPrefix(out, want) {
		t.Errorf("gpreemptd --version: exit %d, %q; want %q...", code, out, want)
	}
	if rev := manifestAnnotation(t, layout, m, "org.opencontainers.image.revision"); rev != "" && rev != "unknown" && !strings.Contains(out, rev) {
		t.Errorf("gpreemptd --version %q does not name the image's revision %s", out, rev)
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "gpreempt", "chart.yaml"), chartPolicy(t), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code := run("/usr/bin/gpreemptd", "--check-config", "/etc/gpreempt/chart.yaml"); code != 0 || !strings.Contains(out, ": ok") {
		t.Errorf("gpreemptd --check-config of the chart's policy: exit %d: %s", code, out)
	}
	if out, code := run("/usr/bin/gpreemptd", "--check-config", "/etc/gpreempt/gpreemptd.yaml"); code != 0 {
		t.Errorf("gpreemptd --check-config of the image's own policy: exit %d: %s", code, out)
	}
	// NVML is dlopened through the image's glibc: with no driver mounted
	// in, gpreemptctl says so (exit 3) rather than failing to load.
	if out, code := run("/usr/bin/gpreemptctl", "devices"); code != 3 || !strings.Contains(out, "libnvidia-ml.so.1") {
		t.Errorf("gpreemptctl devices without a driver: exit %d: %s", code, out)
	}
}

// unpack makes the image's root file system: with umoci where installed
// (another implementation of the format), else by extracting the layers.
func unpack(t *testing.T, layout string, m descriptor) string {
	t.Helper()
	dir := t.TempDir()
	if umoci, err := exec.LookPath("umoci"); err == nil {
		bundle := filepath.Join(dir, "bundle")
		tag := m.Annotations["org.opencontainers.image.ref.name"]
		if out, err := exec.Command(umoci, "unpack", "--image", layout+":"+tag, bundle).CombinedOutput(); err != nil {
			t.Fatalf("umoci unpack: %v: %s", err, out)
		}
		return filepath.Join(bundle, "rootfs")
	}
	t.Log("umoci not installed (make deps installs it): layers extracted by the test")
	var manifest struct{ Layers []descriptor }
	readJSON(t, blob(layout, m.Digest), &manifest)
	root := filepath.Join(dir, "rootfs")
	for _, l := range manifest.Layers {
		f, err := os.Open(blob(layout, l.Digest))
		if err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		extract(t, tar.NewReader(zr), root)
		f.Close()
	}
	return root
}

func manifestAnnotation(t *testing.T, layout string, m descriptor, key string) string {
	var manifest struct{ Annotations map[string]string }
	readJSON(t, blob(layout, m.Digest), &manifest)
	return manifest.Annotations[key]
}

func blob(layout, digest string) string {
	return filepath.Join(layout, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
}

// chartImage is the chart's appVersion and default image repository.
func chartImage(t *testing.T) (appVersion, repo string) {
	t.Helper()
	chart, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "helm", "gpreempt", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		AppVersion string `json:"appVersion"`
	}
	var v struct {
		Image struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"image"`
	}
	values, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "helm", "gpreempt", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(chart, &c); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(values, &v); err != nil {
		t.Fatal(err)
	}
	if v.Image.Tag != "" {
		t.Errorf("values.yaml sets image.tag %q: the default image is the appVersion's", v.Image.Tag)
	}
	return c.AppVersion, v.Image.Repository
}

// chartPolicy is gpreemptd.yaml of the ConfigMap in the chart's rendered
// manifests (deploy/kubernetes/gpreempt.yaml).
func chartPolicy(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", "gpreempt.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range regexp.MustCompile(`(?m)^---$`).Split(string(b), -1) {
		var obj struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		if p, ok := obj.Data["gpreemptd.yaml"]; obj.Kind == "ConfigMap" && ok {
			return []byte(p)
		}
	}
	t.Fatal("no ConfigMap with gpreemptd.yaml in deploy/kubernetes/gpreempt.yaml")
	return nil
}

func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	extract(t, tar.NewReader(f), dir)
}

// extract writes a tar's directories, files and symlinks under dir.
func extract(t *testing.T, tr *tar.Reader, dir string) {
	t.Helper()
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
			t.Fatalf("%s: outside the root", h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, os.FileMode(h.Mode).Perm())
		case tar.TypeReg:
			var b bytes.Buffer
			if _, err = io.Copy(&b, tr); err == nil {
				err = os.WriteFile(p, b.Bytes(), os.FileMode(h.Mode).Perm())
			}
		case tar.TypeSymlink:
			os.Remove(p)
			err = os.Symlink(h.Linkname, p)
		default:
			t.Fatalf("%s: entry type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
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
		t.Fatalf("%s: %v", path, err)
	}
}
