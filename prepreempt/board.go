package prepreempt

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/internal/cuda"
	"github.com/gpreempt/gpreempt/internal/kernels"
)

// An LC board is one page of shared memory through which the hint engines
// of the LC processes on one GPU tell each other that a request's kernels
// are enqueued (Options.Board, docs/PREPREEMPT.md "Several LC processes").
// Every Ready bumps its word; a spinner launched before another process's
// bump gives way, so that process's kernels do not wait out this one's
// hold. Without it two LC processes take turns: the channel group holding
// a spinner stays resident (LC timeslice 5 s) until its own request is
// done, and a request of the other that became ready meanwhile waits.
//
// Layout (little-endian): bytes 0-7 boardMagic, 8-15 the word
// (kernels.SpinBoardWord: seq in the high half, the last bumper's id in
// the low half), the rest of the page zero.
const (
	boardSize  = 4096
	boardMagic = 0x3130_4452_424c_5047 // "GPLBRD01"
	boardWord  = 8
)

// ErrNotBoard: the board file exists but is not an LC board.
var ErrNotBoard = errors.New("not an LC board")

// checkBoard validates a board page's header: all zero (a board nobody has
// used: fresh) or the magic.
func checkBoard(mem []byte) (fresh bool, err error) {
	if len(mem) != boardSize {
		return false, fmt.Errorf("%w: %d bytes, want %d", ErrNotBoard, len(mem), boardSize)
	}
	switch m := binary.LittleEndian.Uint64(mem); m {
	case 0:
		if binary.LittleEndian.Uint64(mem[boardWord:]) != 0 {
			return false, fmt.Errorf("%w: no header but a nonzero word", ErrNotBoard)
		}
		return true, nil
	case boardMagic:
		return false, nil
	default:
		return false, fmt.Errorf("%w: header %#016x", ErrNotBoard, m)
	}
}

// board is an engine's view of an LC board.
type board struct {
	path string
	mem  []byte // the mapped page (nil for a board in Go memory)
	word *uint64
	id   uint32
	reg  *cuda.Registered
}

// processID is this process's bumper id: random, nonzero, the same for
// every engine in the process (they share the primary context's channel
// groups, so one giving way to another would only lose its hold). A pid
// would collide across PID namespaces (containers).
var processID = sync.OnceValue(func() uint32 {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic(err) // crypto/rand does not fail on Linux
		}
		if id := binary.LittleEndian.Uint32(b[:]); id != 0 {
			return id
		}
	}
})

// openBoard maps the board at path, creating it (mode 0600) if it does not
// exist. Processes that share a board need read and write access to it: a
// group-writable file created beforehand (docs/PREPREEMPT.md). It refuses
// symbolic links and anything but a regular file of the board's size.
func openBoard(path string) (_ *board, err error) {
	fail := func(err error) (*board, error) { return nil, fmt.Errorf("LC board %s: %w", path, err) }
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return fail(err)
	}
	defer f.Close() // the mapping outlives the descriptor
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if !fi.Mode().IsRegular() {
		return fail(fmt.Errorf("%w: %v is not a regular file", ErrNotBoard, fi.Mode().Type()))
	}
	switch fi.Size() {
	case boardSize:
	case 0:
		// New, or being created by another process: both extend it to the
		// same size, which leaves it zero.
		if err := f.Truncate(boardSize); err != nil {
			return fail(err)
		}
	default:
		return fail(fmt.Errorf("%w: %d bytes, want %d", ErrNotBoard, fi.Size(), boardSize))
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, boardSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("mmap: %w", err))
	}
	b, err := newBoard(mem)
	if err != nil {
		_ = unix.Munmap(mem)
		return fail(err)
	}
	b.path = path
	return b, nil
}

// newBoard uses mem (a mapped board page, or Go memory in tests) as a board,
// writing the header if it is fresh.
func newBoard(mem []byte) (*board, error) {
	if _, err := checkBoard(mem); err != nil {
		return nil, err
	}
	magic := (*uint64)(unsafe.Pointer(&mem[0]))
	if !atomic.CompareAndSwapUint64(magic, 0, boardMagic) && atomic.LoadUint64(magic) != boardMagic {
		return nil, fmt.Errorf("%w: header %#016x", ErrNotBoard, atomic.LoadUint64(magic))
	}
	return &board{mem: mem, word: (*uint64)(unsafe.Pointer(&mem[boardWord])), id: processID()}, nil
}

// seq is the board's current sequence number.
func (b *board) seq() uint32 { return uint32(atomic.LoadUint64(b.word) >> 32) }

// bump tells the other processes on the board that a request of this one
// has its kernels enqueued.
func (b *board) bump() {
	for {
		old := atomic.LoadUint64(b.word)
		if atomic.CompareAndSwapUint64(b.word, old, kernels.SpinBoardWord(uint32(old>>32)+1, b.id)) {
			return
		}
	}
}

// register makes the board's page usable by kernels in cctx.
func (b *board) register(cctx *cuda.Context) error {
	r, err := cctx.HostRegister(b.mem, cuda.HostRegisterPortable|cuda.HostRegisterDeviceMap)
	if err != nil {
		var fs unix.Statfs_t
		if unix.Statfs(b.path, &fs) == nil && fs.Type != unix.TMPFS_MAGIC {
			// The kernel refuses long-term pins of pages of a writable
			// shared mapping of a file that needs dirty tracking (ext4,
			// overlayfs...); shared memory has none.
			return fmt.Errorf("LC board %s: register with CUDA: %w (the board must be on a tmpfs, such as /run or /dev/shm: this file system's pages cannot be pinned)", b.path, err)
		}
		return fmt.Errorf("LC board %s: register with CUDA: %w", b.path, err)
	}
	b.reg = r
	return nil
}

// devicePtr is the word's device address (0 before register).
func (b *board) devicePtr() uint64 {
	if b.reg == nil {
		return 0
	}
	return uint64(b.reg.DevicePtr()) + boardWord
}

// close unregisters and unmaps the page; no spinner may still use it.
func (b *board) close() error {
	var errs []error
	if b.reg != nil {
		errs = append(errs, b.reg.Unregister())
		b.reg = nil
	}
	if b.path != "" && b.mem != nil {
		errs = append(errs, unix.Munmap(b.mem))
	}
	b.mem, b.word = nil, nil
	return errors.Join(errs...)
}
