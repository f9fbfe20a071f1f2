// Package libfile reads a shared library that a process chose, its own
// libcuda or anything it mapped under that name, as untrusted input (issue
// 52): never a FIFO or device (it would block or act on open), only a
// regular file that root owns and no one else may write, or one the daemon
// knows as libcuda (Trust); of it only the headers, the dynamic symbol
// table and its strings are read, at most 64 MiB in all;
// what was read is cached by the file's identity, so a hostile file costs
// one bounded read, not one a window. The uprobes are attached through the
// descriptor that was read (File.Executable), so they go on the very file
// resolved.
package libfile

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Sentinel errors; trace.ErrNoLibrary and trace.ErrUntrustedLibrary are
// these.
var (
	// ErrNotFound: the file is not there, cannot be opened, or is not a
	// shared library (not a 64-bit little-endian ELF file).
	ErrNotFound = errors.New("library not found")
	// ErrUntrusted: the file named as a library is not one the daemon
	// reads (not a regular file, not root's or known, too large, or its
	// tables past the bounds).
	ErrUntrusted = errors.New("library refused")
)

// Bounds on what is read of one library file. A real libcuda (580) is
// ~100 MiB with a .dynsym of a few thousand entries (~100 KiB).
const (
	maxLibrarySize = 1 << 30
	maxLibraryRead = 64 << 20
	maxDynsym      = 16 << 20
	maxDynstr      = 16 << 20
	maxSections    = 1 << 12
	maxSegments    = 1 << 9
	maxShstrtab    = 1 << 20
)

// fileID is a file's identity and version: what its symbols are cached
// by.
type fileID struct {
	dev, ino    uint64
	mtime, size int64
}

func statID(st *unix.Stat_t) fileID {
	return fileID{dev: st.Dev, ino: st.Ino, mtime: st.Mtim.Nano(), size: st.Size}
}

// known holds the libraries the daemon trusts whoever owns them
// (Trust), by device, inode, change time and size: an inode number
// is reused once its file is gone (a driver upgrade replaces libcuda), and
// its change time is the kernel's to set, not the new owner's.
var known = struct {
	sync.Mutex
	m map[knownID]bool
}{m: map[knownID]bool{}}

type knownID struct {
	dev, ino    uint64
	ctime, size int64
}

func knownOf(st *unix.Stat_t) knownID {
	return knownID{dev: st.Dev, ino: st.Ino, ctime: st.Ctim.Nano(), size: st.Size}
}

// Trust marks the file at path as a known libcuda: a process that maps
// that same file has it read whoever owns it.
func Trust(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNotFound, path, err)
	}
	known.Lock()
	known.m[knownOf(&st)] = true
	known.Unlock()
	return nil
}

// trusted says whether a regular file may be read as a library: root's,
// writable by no one else, or known.
func trusted(st *unix.Stat_t) error {
	known.Lock()
	ok := known.m[knownOf(st)]
	known.Unlock()
	switch {
	case ok:
		return nil
	case st.Uid != 0:
		return fmt.Errorf("owned by uid %d, not root, and not a known libcuda", st.Uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("writable by group or others (mode %o)", st.Mode&0o7777)
	}
	return nil
}

// symbolCache holds what was resolved of each library file, by identity
// and the names asked: a bounded map, dropped whole when full.
var symbolCache = struct {
	sync.Mutex
	m map[symbolKey]symbolResult
}{m: map[symbolKey]symbolResult{}}

type symbolKey struct {
	id    fileID
	names string
}

type symbolResult struct {
	offsets map[string]uint64
	err     error
}

const maxCachedLibraries = 256

// File is one library file, open and resolved: the file offsets of the
// functions asked that it defines.
type File struct {
	f       *os.File
	id      fileID
	offsets map[string]uint64
}

// Close closes the file (the uprobes attached through it stay).
func (l *File) Close() error { return l.f.Close() }

// Key is the file's identity, for sharing one Executable among the
// processes that map it.
func (l *File) Key() string { return fmt.Sprintf("%d:%d", l.id.dev, l.id.ino) }

// Executable is the file for cilium's uprobe calls: by the descriptor's
// /proc path, which the kernel resolves to the open file itself. Probes
// must carry their Offset (UprobeOptions.Address): the library never
// reads the file's symbols itself. Valid while l is open.
func (l *File) Executable() (*link.Executable, error) {
	return link.OpenExecutable("/proc/self/fd/" + strconv.Itoa(int(l.f.Fd())))
}

// Offset is where the function name lies in the file, if the file defines
// it and it was asked for at Open: what a uprobe is attached at.
func (l *File) Offset(name string) (uint64, bool) {
	off, ok := l.offsets[name]
	return off, ok
}

// Open opens path as a library and resolves names in it. Errors:
// ErrNotFound, ErrUntrusted.
func Open(path string, names []string) (*File, error) {
	f, id, err := openUntrusted(path)
	if err != nil {
		return nil, err
	}
	sorted := slices.Clone(names)
	slices.Sort(sorted)
	k := symbolKey{id: id, names: strings.Join(sorted, "\x00")}
	symbolCache.Lock()
	r, ok := symbolCache.m[k]
	symbolCache.Unlock()
	if !ok {
		r.offsets, r.err = functionOffsets(f, id.size, names)
		symbolCache.Lock()
		if len(symbolCache.m) >= maxCachedLibraries {
			clear(symbolCache.m)
		}
		symbolCache.m[k] = r
		symbolCache.Unlock()
	}
	if r.err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, r.err)
	}
	return &File{f: f, id: id, offsets: r.offsets}, nil
}

// openUntrusted opens path for reading only if it is a regular file,
// trusted, and not too large. The first open is O_PATH, which opens
// nothing (no FIFO waits for a writer, no device's open runs); the file is
// then reopened through that descriptor, so both are one inode.
func openUntrusted(path string) (*os.File, fileID, error) {
	pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fileID{}, fmt.Errorf("%w: %s: %w", ErrNotFound, path, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, fileID{}, fmt.Errorf("%w: %s: %w", ErrNotFound, path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fileID{}, fmt.Errorf("%w: %s: not a regular file (mode %o)", ErrUntrusted, path, st.Mode)
	}
	if err := trusted(&st); err != nil {
		return nil, fileID{}, fmt.Errorf("%w: %s: %v", ErrUntrusted, path, err)
	}
	if st.Size > maxLibrarySize {
		return nil, fileID{}, fmt.Errorf("%w: %s: %d bytes, more than %d", ErrUntrusted, path, st.Size, maxLibrarySize)
	}
	fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(pfd), unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fileID{}, fmt.Errorf("%w: %s: %w", ErrNotFound, path, err)
	}
	var again unix.Stat_t
	if err := unix.Fstat(fd, &again); err != nil || again.Dev != st.Dev || again.Ino != st.Ino {
		unix.Close(fd)
		return nil, fileID{}, fmt.Errorf("%w: %s changed while opened", ErrUntrusted, path)
	}
	return os.NewFile(uintptr(fd), path), statID(&again), nil
}

// budgetReader is a ReaderAt that fails once n bytes have been read.
type budgetReader struct {
	r io.ReaderAt
	n int64
}

var errReadBudget = fmt.Errorf("%w: more than %d bytes to read", ErrUntrusted, maxLibraryRead)

func (b *budgetReader) ReadAt(p []byte, off int64) (int, error) {
	if int64(len(p)) > b.n {
		return 0, errReadBudget
	}
	b.n -= int64(len(p))
	return b.r.ReadAt(p, off)
}

// functionOffsets reads the file offsets of the defined functions names
// from an ELF file's dynamic symbol table (a shared library's exports),
// within the bounds above. Versioned names (cuLaunchKernel@@libcuda.so.1)
// are matched by their name.
func functionOffsets(r io.ReaderAt, size int64, names []string) (map[string]uint64, error) {
	br := &budgetReader{r: r, n: maxLibraryRead}
	// The header's counts first: debug/elf reads every section header and
	// the section names before it can be asked anything.
	var hdr [64]byte
	if _, err := br.ReadAt(hdr[:], 0); err != nil {
		return nil, fmt.Errorf("%w: not an ELF file: %w", ErrNotFound, err)
	}
	if string(hdr[:4]) != elf.ELFMAG || elf.Class(hdr[elf.EI_CLASS]) != elf.ELFCLASS64 || elf.Data(hdr[elf.EI_DATA]) != elf.ELFDATA2LSB {
		return nil, fmt.Errorf("%w: not a 64-bit little-endian ELF file", ErrNotFound)
	}
	le := binary.LittleEndian
	shoff, phnum, shnum, shstrndx := le.Uint64(hdr[40:]), le.Uint16(hdr[56:]), le.Uint16(hdr[60:]), le.Uint16(hdr[62:])
	if phnum > maxSegments || shnum == 0 || shnum > maxSections || shstrndx >= shnum {
		return nil, fmt.Errorf("%w: %d segments, %d sections", ErrUntrusted, phnum, shnum)
	}
	var sh [64]byte
	if _, err := br.ReadAt(sh[:], int64(shoff)+int64(shstrndx)*64); err != nil {
		return nil, fmt.Errorf("%w: section headers: %w", ErrNotFound, err)
	}
	if n := le.Uint64(sh[32:]); n > maxShstrtab {
		return nil, fmt.Errorf("%w: section names of %d bytes", ErrUntrusted, n)
	}
	f, err := elf.NewFile(io.NewSectionReader(br, 0, size))
	if err != nil {
		if errors.Is(err, errReadBudget) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	dynsym := f.SectionByType(elf.SHT_DYNSYM)
	if dynsym == nil || dynsym.Link == 0 || int(dynsym.Link) >= len(f.Sections) {
		return map[string]uint64{}, nil // no exports: none of names
	}
	dynstr := f.Sections[dynsym.Link]
	if dynsym.Size > maxDynsym || dynstr.Size > maxDynstr || dynsym.Entsize != 24 && dynsym.Entsize != 0 {
		return nil, fmt.Errorf("%w: dynamic symbols of %d bytes, strings of %d", ErrUntrusted, dynsym.Size, dynstr.Size)
	}
	strs := make([]byte, dynstr.Size)
	if _, err := br.ReadAt(strs, int64(dynstr.Offset)); err != nil {
		if errors.Is(err, errReadBudget) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: .dynstr: %w", ErrNotFound, err)
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]uint64{}
	buf := make([]byte, 24*1024)
	for at := uint64(0); at < dynsym.Size && len(out) < len(want); {
		n := min(uint64(len(buf)), dynsym.Size-at)
		n -= n % 24
		if n == 0 {
			break
		}
		if _, err := br.ReadAt(buf[:n], int64(dynsym.Offset+at)); err != nil {
			if errors.Is(err, errReadBudget) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: .dynsym: %w", ErrNotFound, err)
		}
		for e := buf[:n]; len(e) >= 24; e = e[24:] {
			// Elf64_Sym: name u32, info u8, other u8, shndx u16, value u64, size u64.
			name, info, shndx, value := le.Uint32(e), e[4], elf.SectionIndex(le.Uint16(e[6:])), le.Uint64(e[8:])
			if elf.ST_TYPE(info) != elf.STT_FUNC || shndx == elf.SHN_UNDEF || value == 0 || uint64(name) >= uint64(len(strs)) {
				continue
			}
			s := strs[name:]
			if i := slices.Index(s, 0); i >= 0 {
				s = s[:i]
			}
			if !want[string(s)] {
				continue
			}
			if _, seen := out[string(s)]; !seen {
				out[string(s)] = fileOffset(f.Progs, value)
			}
		}
		at += n
	}
	return out, nil
}

// fileOffset is where the function at virtual address v lies in the file:
// what a uprobe is placed by (as cilium's Executable computes it).
func fileOffset(progs []*elf.Prog, v uint64) uint64 {
	for _, p := range progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && p.Vaddr <= v && v < p.Vaddr+p.Memsz {
			return v - p.Vaddr + p.Off
		}
	}
	return v
}
