package rmfake

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpreempt/gpreempt/ioctl"
)

// TraceAlloc is one successful NV_ESC_RM_ALLOC as recorded by an LD_PRELOAD
// interposer on libcuda (testdata/h100-580.159.04-alloc-sequence.txt):
// "fd=8 client=0xc1d00022 parent=0x5c000002 h=0x5c000015 class=0xa06c".
type TraceAlloc struct {
	FD     int
	Client ioctl.Handle
	Parent ioctl.Handle
	Handle ioctl.Handle
	Class  uint32
}

// ParseTrace reads an allocation trace. Blank lines, '#' comments and bare
// marker words (the recorder writes "before-stop") are skipped; any other
// malformed line is an error naming its line number.
func ParseTrace(r io.Reader) ([]TraceAlloc, error) {
	var out []TraceAlloc
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || !strings.Contains(line, "=") {
			continue
		}
		a, err := parseTraceLine(line)
		if err != nil {
			return nil, fmt.Errorf("trace line %d: %w", n, err)
		}
		out = append(out, a)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read trace: %w", err)
	}
	return out, nil
}

func parseTraceLine(line string) (TraceAlloc, error) {
	var a TraceAlloc
	seen := map[string]bool{}
	for _, field := range strings.Fields(line) {
		k, v, ok := strings.Cut(field, "=")
		if !ok {
			return a, fmt.Errorf("field %q is not key=value", field)
		}
		if seen[k] {
			return a, fmt.Errorf("field %q repeated", k)
		}
		seen[k] = true
		switch k {
		case "fd", "client", "parent", "h", "class":
		default:
			return a, fmt.Errorf("unknown field %q", k)
		}
		n, err := strconv.ParseUint(v, 0, 32)
		if err != nil {
			return a, fmt.Errorf("field %s=%q: %w", k, v, err)
		}
		switch k {
		case "fd":
			if n > 1<<20 {
				return a, fmt.Errorf("fd %d out of range", n)
			}
			a.FD = int(n)
		case "client":
			a.Client = ioctl.Handle(n)
		case "parent":
			a.Parent = ioctl.Handle(n)
		case "h":
			a.Handle = ioctl.Handle(n)
		case "class":
			a.Class = uint32(n)
		}
	}
	for _, k := range []string{"fd", "client", "parent", "h", "class"} {
		if !seen[k] {
			return a, fmt.Errorf("missing field %q", k)
		}
	}
	if a.Handle == 0 {
		return a, fmt.Errorf("h=0: a successful allocation always has a handle")
	}
	return a, nil
}
