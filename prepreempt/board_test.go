package prepreempt

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gpreempt/gpreempt/internal/kernels"
)

// memBoard is a board in Go memory (8-byte aligned), seen by a process of
// the given id; other views of the same page act as other processes.
func memBoard(t *testing.T, page []uint64, id uint32) *board {
	t.Helper()
	b, err := newBoard(unsafe.Slice((*byte)(unsafe.Pointer(&page[0])), boardSize))
	if err != nil {
		t.Fatal(err)
	}
	b.id = id
	return b
}

func TestBoardFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lc-board")
	a, err := openBoard(path)
	if err != nil {
		t.Fatal(err)
	}
	defer a.close()
	b, err := openBoard(path)
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != boardSize || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("created board: size %d, mode %v; want %d bytes, no access for others", fi.Size(), fi.Mode(), boardSize)
	}
	// Two mappings of one file are two processes' views: a bump through
	// one is seen through the other, with the bumper's id.
	b.id = a.id + 1
	a.bump()
	if got, want := atomic.LoadUint64(b.word), kernels.SpinBoardWord(1, a.id); got != want {
		t.Fatalf("after a bump: %#x, want %#x", got, want)
	}
	b.bump()
	if b.seq() != 2 || a.seq() != 2 {
		t.Errorf("seq %d / %d after two bumps, want 2", a.seq(), b.seq())
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := binary.LittleEndian.Uint64(raw); m != boardMagic {
		t.Errorf("header %#x on disk, want %#x", m, uint64(boardMagic))
	}
}

func TestBoardFileRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	other := make([]byte, boardSize)
	copy(other, "#!/bin/sh\n")
	noHeader := make([]byte, boardSize)
	noHeader[boardWord] = 1
	target := write("target", make([]byte, boardSize))
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		notBoard   bool
	}{
		{"short file", write("short", []byte("hello")), true},
		{"another file of the size", write("other", other), true},
		{"a word without a header", write("noheader", noHeader), true},
		{"a directory", dir, false},
		{"a symbolic link", link, false},
		{"a missing directory", filepath.Join(dir, "nope", "board"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := os.ReadFile(tc.path)
			b, err := openBoard(tc.path)
			if err == nil {
				b.close()
				t.Fatal("opened")
			}
			if got := errors.Is(err, ErrNotBoard); got != tc.notBoard {
				t.Errorf("errors.Is(%v, ErrNotBoard) = %v, want %v", err, got, tc.notBoard)
			}
			if after, _ := os.ReadFile(tc.path); string(after) != string(before) {
				t.Error("a refused file was changed")
			}
			t.Log(err)
		})
	}
}

func FuzzCheckBoard(f *testing.F) {
	page := make([]byte, boardSize)
	f.Add(page)
	magic := make([]byte, boardSize)
	binary.LittleEndian.PutUint64(magic, boardMagic)
	f.Add(magic)
	f.Add([]byte("GPLBRD01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fresh, err := checkBoard(data)
		if err != nil {
			if !errors.Is(err, ErrNotBoard) {
				t.Fatalf("error %v is not ErrNotBoard", err)
			}
			return
		}
		m := binary.LittleEndian.Uint64(data)
		if len(data) != boardSize || (m != 0 && m != boardMagic) || fresh != (m == 0) {
			t.Fatalf("accepted %d bytes with header %#x (fresh %v)", len(data), m, fresh)
		}
	})
}

// TestReadyBumpsBoard: every Ready bumps the board with the process's id,
// whether or not its request had a spinner; Cancel does not.
func TestReadyBumpsBoard(t *testing.T) {
	e, clk, g := simEngine(t, Options{}, time.Microsecond, 100*time.Microsecond, 0)
	page := make([]uint64, boardSize/8)
	e.board = memBoard(t, page, 7)
	g.board = e.board
	ctx := context.Background()
	var want uint32
	for _, tc := range []struct {
		name   string
		prep   time.Duration
		off    bool // gpreemptd said no spinners
		cancel bool
	}{
		{"spinner launched at once", 0, false, false},
		{"Ready before the spinner's launch", 50 * time.Millisecond, false, false},
		{"no spinner (gpreemptd)", 0, true, false},
		{"cancelled", 0, false, true},
	} {
		e.SetPrepreempt(!tc.off)
		r, err := e.Hint(ctx, "x", tc.prep)
		if err != nil {
			t.Fatal(err)
		}
		clk.advance(200 * time.Microsecond)
		if tc.cancel {
			err = r.Cancel()
		} else {
			err = r.Ready()
			want++
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if w := atomic.LoadUint64(e.board.word); w != kernels.SpinBoardWord(want, 7) && !(want == 0 && w == 0) {
			t.Errorf("%s: board word %#x, want seq %d by 7", tc.name, w, want)
		}
		waitStats(t, e, func(Stats) bool { return len(e.free) == e.opts.Slots })
	}
	if s := e.Stats(); s.GaveWay != 0 {
		t.Errorf("its own bumps made %d spinners give way", s.GaveWay)
	}
}

// TestSpinnerGivesWay: another process's Ready during a hold ends the
// spinner (Stats.GaveWay); the request's own Ready afterwards is an
// ordinary early one, and the exit, which came before the release, does
// not move the GPU clock.
func TestSpinnerGivesWay(t *testing.T) {
	const offset = 5_000e9
	e, clk, g := simEngine(t, Options{InitialSwitch: 100 * time.Microsecond}, time.Microsecond, 100*time.Microsecond, offset)
	if err := e.calibrateClock(); err != nil {
		t.Fatal(err)
	}
	calibrated := e.clock.get()
	page := make([]uint64, boardSize/8)
	e.board = memBoard(t, page, 7)
	g.board = e.board
	other := memBoard(t, page, 9)

	r, err := e.Hint(context.Background(), "x", 0)
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(300 * time.Microsecond) // resident, holding
	if _, end, _ := g.stamps(r.slot); end != 0 {
		t.Fatal("spinner exited before anything happened")
	}
	other.bump()
	clk.advance(10 * time.Microsecond)
	if _, end, why := g.stamps(r.slot); end == 0 || why != kernels.SpinExitGaveWay {
		t.Fatalf("after another process's bump: exit %d, why %d; want gave way (%d)", end, why, kernels.SpinExitGaveWay)
	}
	clk.advance(time.Millisecond)
	if err := r.Ready(); err != nil {
		t.Fatal(err)
	}
	s := waitStats(t, e, func(s Stats) bool { return s.GaveWay == 1 })
	if s.Early != 1 {
		t.Errorf("early %d, want 1: the request itself went as planned", s.Early)
	}
	if got := e.clock.get(); got != calibrated {
		t.Errorf("GPU clock offset moved from %d to %d on an exit before the release", calibrated, got)
	}
	if got, want := atomic.LoadUint64(e.board.word), kernels.SpinBoardWord(2, 7); got != want {
		t.Errorf("board word %#x after the other's bump and this Ready, want %#x", got, want)
	}
}
