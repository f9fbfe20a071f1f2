// Command buildoutputs fails when git tracks a build output: an executable
// or shared library (ELF for any machine but BPF), a static archive or a
// Mach-O binary. `make vet` runs it, so that a binary built into the tree
// is never committed again.
//
// The BPF objects bpf2go generates (internal/trace/*_bpfel.o) are tracked
// on purpose, and checked against their sources by `make ebpf-check`.
package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
)

func main() {
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "buildoutputs: git ls-files: %v (not a git checkout: nothing checked)\n", err)
		return
	}
	var bad int
	for _, name := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		kind, err := classify(string(name))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) { // deleted in the work tree
				continue
			}
			fmt.Fprintf(os.Stderr, "buildoutputs: %v\n", err)
			os.Exit(1)
		}
		if kind != "" {
			fmt.Fprintf(os.Stderr, "buildoutputs: %s is a tracked build output (%s): git rm --cached it and add it to .gitignore\n", name, kind)
			bad++
		}
	}
	if bad > 0 {
		os.Exit(1)
	}
}

// classify says what build output the file at path is, "" for none.
func classify(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return "", err
	}
	head := make([]byte, 64)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", err
	}
	return kindOf(head[:n]), nil
}

// kindOf classifies a file by its first bytes.
func kindOf(head []byte) string {
	switch {
	case bytes.HasPrefix(head, []byte(elf.ELFMAG)):
		if machine, ok := elfMachine(head); ok && machine == elf.EM_BPF {
			return ""
		}
		return "ELF"
	case bytes.HasPrefix(head, []byte("!<arch>\n")):
		return "ar archive"
	case bytes.HasPrefix(head, []byte{0xcf, 0xfa, 0xed, 0xfe}), bytes.HasPrefix(head, []byte{0xce, 0xfa, 0xed, 0xfe}):
		return "Mach-O"
	}
	return ""
}

// elfMachine reads e_machine from an ELF header's first bytes.
func elfMachine(head []byte) (elf.Machine, bool) {
	if len(head) < 20 {
		return 0, false
	}
	var m uint16
	switch elf.Data(head[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		m = uint16(head[18]) | uint16(head[19])<<8
	case elf.ELFDATA2MSB:
		m = uint16(head[18])<<8 | uint16(head[19])
	default:
		return 0, false
	}
	return elf.Machine(m), true
}
