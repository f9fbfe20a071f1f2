package prepreempt

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

// The few libgdrapi (GDRCopy 2.x) entry points the flag backend uses,
// resolved at run time so that nothing is needed to build.
typedef struct { unsigned long h; } gp_gdr_mh_t;
typedef struct { uint64_t va; uint64_t mapped_size; uint32_t page_size; } gp_gdr_info_head_t;

static void *gp_gdr_lib;
static void *(*p_gdr_open)(void);
static int (*p_gdr_close)(void *);
static int (*p_gdr_pin_buffer)(void *, unsigned long, size_t, uint64_t, uint32_t, gp_gdr_mh_t *);
static int (*p_gdr_unpin_buffer)(void *, gp_gdr_mh_t);
static int (*p_gdr_map)(void *, gp_gdr_mh_t, void **, size_t);
static int (*p_gdr_unmap)(void *, gp_gdr_mh_t, void *, size_t);
static int (*p_gdr_get_info)(void *, gp_gdr_mh_t, void *);

static int gp_gdr_load(void) {
	if (gp_gdr_lib) return 0;
	void *l = dlopen("libgdrapi.so.2", RTLD_NOW | RTLD_LOCAL);
	if (!l) l = dlopen("libgdrapi.so", RTLD_NOW | RTLD_LOCAL);
	if (!l) return -1;
	p_gdr_open = dlsym(l, "gdr_open");
	p_gdr_close = dlsym(l, "gdr_close");
	p_gdr_pin_buffer = dlsym(l, "gdr_pin_buffer");
	p_gdr_unpin_buffer = dlsym(l, "gdr_unpin_buffer");
	p_gdr_map = dlsym(l, "gdr_map");
	p_gdr_unmap = dlsym(l, "gdr_unmap");
	p_gdr_get_info = dlsym(l, "gdr_get_info_v2");
	if (!p_gdr_get_info) p_gdr_get_info = dlsym(l, "gdr_get_info");
	if (!p_gdr_open || !p_gdr_close || !p_gdr_pin_buffer || !p_gdr_unpin_buffer ||
	    !p_gdr_map || !p_gdr_unmap || !p_gdr_get_info) {
		dlclose(l);
		return -2;
	}
	gp_gdr_lib = l;
	return 0;
}

static void *gp_gdr_open(void) { return p_gdr_open(); }
static int gp_gdr_close(void *g) { return p_gdr_close(g); }
static int gp_gdr_pin(void *g, uint64_t addr, uint64_t size, unsigned long *h) {
	gp_gdr_mh_t mh = {0};
	int r = p_gdr_pin_buffer(g, (unsigned long)addr, (size_t)size, 0, 0, &mh);
	*h = mh.h;
	return r;
}
static int gp_gdr_unpin(void *g, unsigned long h) { gp_gdr_mh_t mh = {h}; return p_gdr_unpin_buffer(g, mh); }
static int gp_gdr_map(void *g, unsigned long h, void **va, uint64_t size) { gp_gdr_mh_t mh = {h}; return p_gdr_map(g, mh, va, (size_t)size); }
static int gp_gdr_unmap(void *g, unsigned long h, void *va, uint64_t size) { gp_gdr_mh_t mh = {h}; return p_gdr_unmap(g, mh, va, (size_t)size); }
static int gp_gdr_info_va(void *g, unsigned long h, uint64_t *va) {
	// gdr_info_t grew fields across 2.x; its first field has always been va.
	uint64_t info[16] = {0};
	gp_gdr_mh_t mh = {h};
	int r = p_gdr_get_info(g, mh, info);
	*va = info[0];
	return r;
}
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"
)

// GDRDevicePath is GDRCopy's kernel module node.
const GDRDevicePath = "/dev/gdrdrv"

// cgoGDR is libgdrapi, dlopened.
type cgoGDR struct{ g unsafe.Pointer }

func (l *cgoGDR) Open() error {
	if _, err := os.Stat(GDRDevicePath); err != nil {
		return fmt.Errorf("%s: %w", GDRDevicePath, err)
	}
	switch C.gp_gdr_load() {
	case -1:
		return fmt.Errorf("libgdrapi.so.2 not found")
	case -2:
		return fmt.Errorf("libgdrapi lacks a required symbol")
	}
	l.g = C.gp_gdr_open()
	if l.g == nil {
		return fmt.Errorf("gdr_open failed")
	}
	return nil
}

func (l *cgoGDR) Pin(addr, size uint64) (uint64, error) {
	var h C.ulong
	if r := C.gp_gdr_pin(l.g, C.uint64_t(addr), C.uint64_t(size), &h); r != 0 {
		return 0, fmt.Errorf("error %d", int(r))
	}
	return uint64(h), nil
}

func (l *cgoGDR) Map(h, size uint64) (unsafe.Pointer, error) {
	var va unsafe.Pointer
	if r := C.gp_gdr_map(l.g, C.ulong(h), &va, C.uint64_t(size)); r != 0 {
		return nil, fmt.Errorf("error %d", int(r))
	}
	return va, nil
}

func (l *cgoGDR) InfoVA(h uint64) (uint64, error) {
	var va C.uint64_t
	if r := C.gp_gdr_info_va(l.g, C.ulong(h), &va); r != 0 {
		return 0, fmt.Errorf("error %d", int(r))
	}
	return uint64(va), nil
}

func (l *cgoGDR) Unmap(h uint64, p unsafe.Pointer, size uint64) error {
	if r := C.gp_gdr_unmap(l.g, C.ulong(h), p, C.uint64_t(size)); r != 0 {
		return fmt.Errorf("gdr_unmap: error %d", int(r))
	}
	return nil
}

func (l *cgoGDR) Unpin(h uint64) error {
	if r := C.gp_gdr_unpin(l.g, C.ulong(h)); r != 0 {
		return fmt.Errorf("gdr_unpin_buffer: error %d", int(r))
	}
	return nil
}

func (l *cgoGDR) Close() error {
	if l.g == nil {
		return nil
	}
	r := C.gp_gdr_close(l.g)
	l.g = nil
	if r != 0 {
		return fmt.Errorf("gdr_close: error %d", int(r))
	}
	return nil
}
