package kernels

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// PTXInfo is what [CheckPTX] reads from a module's text.
type PTXInfo struct {
	Version     string   // ".version" operand, e.g. "8.0"
	Target      string   // ".target" operand, e.g. "sm_70"
	AddressSize int      // ".address_size" operand: 64
	Entries     []string // .entry names, in order
}

var (
	reComment     = regexp.MustCompile(`//[^\n]*`)
	reVersion     = regexp.MustCompile(`(?m)^\s*\.version\s+(\d+\.\d+)\s*$`)
	reTarget      = regexp.MustCompile(`(?m)^\s*\.target\s+(sm_\d+[a-z]?)`)
	reAddressSize = regexp.MustCompile(`(?m)^\s*\.address_size\s+(\d+)\s*$`)
	reEntry       = regexp.MustCompile(`\.entry\s+([A-Za-z_$][\w$]*)\s*\(`)
	reParamDecl   = regexp.MustCompile(`\.param\b[^,]*?([A-Za-z_$][\w$]*)\s*$`)
	reRegDecl     = regexp.MustCompile(`\.reg\s+\.\w+\s+%([A-Za-z_][\w]*?)(?:<(\d+)>)?\s*;`)
	reRegUse      = regexp.MustCompile(`%([A-Za-z_]+)(\d+)\b`)
	reParamUse    = regexp.MustCompile(`ld\.param(?:\.\w+)+\s+[^,]+,\s*\[([A-Za-z_$][\w$]*)(?:\+\d+)?\]`)
	reLabelDef    = regexp.MustCompile(`(?m)^\s*(\$?[A-Za-z_][\w$]*):`)
	reBranch      = regexp.MustCompile(`\bbra(?:\.uni)?\s+(\$?[A-Za-z_][\w$]*)\s*;`)
)

// specialRegs are PTX special registers whose names end in digits, which the
// register-use check must not take for numbered virtual registers.
var specialRegs = map[string]bool{"clock": true, "envreg": true, "pm": true, "lanemask_eq": true}

// CheckPTX does a superficial, toolkit-free check of a PTX module: the header
// directives are present, and within each entry every numbered virtual
// register used is declared (%r7 needs ".reg .b32 %r<8>"), every ld.param
// names a declared parameter, every branch target is a label of that entry,
// and the body returns. It catches the mistakes hand-written PTX is prone to
// before the JIT does, on machines without a GPU; it is no substitute for
// ptxas.
func CheckPTX(ptx []byte) (PTXInfo, error) {
	src := reComment.ReplaceAllString(string(ptx), "")
	var info PTXInfo
	var errs []error
	if m := reVersion.FindStringSubmatch(src); m != nil {
		info.Version = m[1]
	} else {
		errs = append(errs, errors.New("no .version directive"))
	}
	if m := reTarget.FindStringSubmatch(src); m != nil {
		info.Target = m[1]
	} else {
		errs = append(errs, errors.New("no .target directive"))
	}
	if m := reAddressSize.FindStringSubmatch(src); m != nil {
		info.AddressSize, _ = strconv.Atoi(m[1])
	}
	if info.AddressSize != 64 {
		errs = append(errs, errors.New("no .address_size 64 directive"))
	}

	for _, loc := range reEntry.FindAllStringSubmatchIndex(src, -1) {
		name := src[loc[2]:loc[3]]
		info.Entries = append(info.Entries, name)
		params, body, err := splitEntry(src, loc[1]-1)
		if err != nil {
			errs = append(errs, fmt.Errorf("entry %s: %w", name, err))
			continue
		}
		if err := checkEntry(params, body); err != nil {
			errs = append(errs, fmt.Errorf("entry %s: %w", name, err))
		}
	}
	if len(info.Entries) == 0 {
		errs = append(errs, errors.New("no .entry"))
	}
	return info, errors.Join(errs...)
}

// splitEntry returns the parameter list and body text of the entry whose
// parameter list opens at src[open].
func splitEntry(src string, open int) (params, body string, err error) {
	closeParen := strings.IndexByte(src[open:], ')')
	if closeParen < 0 {
		return "", "", errors.New("unterminated parameter list")
	}
	params = src[open+1 : open+closeParen]
	rest := src[open+closeParen+1:]
	brace := strings.IndexByte(rest, '{')
	if brace < 0 {
		return "", "", errors.New("no body")
	}
	depth := 0
	for i := brace; i < len(rest); i++ {
		switch rest[i] {
		case '{':
			depth++
		case '}':
			depth--
			if depth == 0 {
				return params, rest[brace+1 : i], nil
			}
		}
	}
	return "", "", errors.New("unbalanced braces")
}

func checkEntry(params, body string) error {
	var errs []error

	declaredParams := map[string]bool{}
	for p := range strings.SplitSeq(params, ",") {
		if m := reParamDecl.FindStringSubmatch(strings.TrimSpace(p)); m != nil {
			declaredParams[m[1]] = true
		}
	}
	for _, m := range reParamUse.FindAllStringSubmatch(body, -1) {
		if !declaredParams[m[1]] {
			errs = append(errs, fmt.Errorf("ld.param of undeclared parameter %s", m[1]))
		}
	}

	// regs maps a register prefix to how many are declared (%r<5> declares
	// %r0..%r4); a plain ".reg .b32 %x;" has no numbered form.
	regs := map[string]int{}
	for _, m := range reRegDecl.FindAllStringSubmatch(body, -1) {
		if m[2] == "" {
			continue
		}
		n, _ := strconv.Atoi(m[2])
		regs[m[1]] = max(regs[m[1]], n)
	}
	seen := map[string]bool{}
	for _, m := range reRegUse.FindAllStringSubmatch(body, -1) {
		prefix, idx := m[1], m[2]
		if specialRegs[prefix] || seen[m[0]] {
			continue
		}
		seen[m[0]] = true
		n, ok := regs[prefix]
		i, _ := strconv.Atoi(idx)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("register %s used but no .reg %%%s<N> declared", m[0], prefix))
		case i >= n:
			errs = append(errs, fmt.Errorf("register %s used but only %%%s<%d> declared", m[0], prefix, n))
		}
	}

	labels := map[string]bool{}
	for _, m := range reLabelDef.FindAllStringSubmatch(body, -1) {
		labels[m[1]] = true
	}
	for _, m := range reBranch.FindAllStringSubmatch(body, -1) {
		if !labels[m[1]] {
			errs = append(errs, fmt.Errorf("branch to undefined label %s", m[1]))
		}
	}

	if !strings.Contains(body, "ret;") {
		errs = append(errs, errors.New("no ret;"))
	}
	return errors.Join(errs...)
}
