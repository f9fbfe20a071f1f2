package kernels

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestEmbeddedPTX fails CI when the embedded module is missing, truncated or
// edited into something the JIT would reject for the reasons CheckPTX knows.
func TestEmbeddedPTX(t *testing.T) {
	info, err := CheckPTX(PTX)
	if err != nil {
		t.Fatalf("embedded kernels.ptx: %v", err)
	}
	if !strings.HasPrefix(info.Target, "sm_") {
		t.Errorf("target = %q, want sm_XX", info.Target)
	}
	if info.Version == "" {
		t.Error("no .version")
	}
	for _, e := range Entries {
		if !slices.Contains(info.Entries, e) {
			t.Errorf("entry %q missing; have %v", e, info.Entries)
		}
	}
}

// TestSourceDeclaresEntries keeps kernels.cu and the Go entry names in step:
// an entry that is not extern "C" would get a mangled PTX name.
func TestSourceDeclaresEntries(t *testing.T) {
	src, err := os.ReadFile("kernels.cu")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range Entries {
		re := regexp.MustCompile(`extern "C" __global__ void ` + e + `\(`)
		if !re.Match(src) {
			t.Errorf("kernels.cu does not declare extern \"C\" __global__ void %s(", e)
		}
	}
}

const goodPTX = `
.version 8.0
.target sm_70
.address_size 64

.visible .entry k(
	.param .u64 k_param_out,
	.param .u64 .ptr .align 1 k_param_n
)
{
	.reg .pred %p<2>;
	.reg .b64 %rd<4>;
	ld.param.u64 %rd1, [k_param_out];
	ld.param.u64 %rd2, [k_param_n];
	mov.u64 %rd3, %globaltimer;
$L_top:
	setp.eq.u64 %p1, %rd2, 0;
	@%p1 bra $L_top;
	ret;
}
`

func TestCheckPTX(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(string) string
		wantErr string // "" = valid
	}{
		{"valid", func(s string) string { return s }, ""},
		{"no version", func(s string) string { return strings.Replace(s, ".version 8.0", "", 1) }, "no .version"},
		{"no target", func(s string) string { return strings.Replace(s, ".target sm_70", "", 1) }, "no .target"},
		{"32-bit", func(s string) string { return strings.Replace(s, "address_size 64", "address_size 32", 1) }, "address_size"},
		{"register past declared range", func(s string) string { return strings.Replace(s, "%rd3, %globaltimer", "%rd4, %globaltimer", 1) }, "%rd4 used but only %rd<4>"},
		{"undeclared register kind", func(s string) string { return strings.Replace(s, "mov.u64 %rd3", "mov.u32 %r1", 1) }, "%r1 used but no .reg"},
		{"undeclared param", func(s string) string { return strings.Replace(s, "[k_param_n]", "[k_param_x]", 1) }, "undeclared parameter k_param_x"},
		{"undefined label", func(s string) string { return strings.Replace(s, "bra $L_top", "bra $L_nowhere", 1) }, "undefined label $L_nowhere"},
		{"no ret", func(s string) string { return strings.Replace(s, "ret;", "", 1) }, "no ret"},
		{"unbalanced", func(s string) string { return strings.TrimSuffix(strings.TrimSpace(s), "}") }, "unbalanced"},
		{"no entry", func(s string) string { return strings.Replace(s, ".entry k(", ".func k(", 1) }, "no .entry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := CheckPTX([]byte(tt.edit(goodPTX)))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("no error, want %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckPTXInfo(t *testing.T) {
	info, err := CheckPTX([]byte(goodPTX))
	if err != nil {
		t.Fatal(err)
	}
	want := PTXInfo{Version: "8.0", Target: "sm_70", AddressSize: 64, Entries: []string{"k"}}
	if info.Version != want.Version || info.Target != want.Target || info.AddressSize != want.AddressSize || !slices.Equal(info.Entries, want.Entries) {
		t.Fatalf("info = %+v, want %+v", info, want)
	}
}
