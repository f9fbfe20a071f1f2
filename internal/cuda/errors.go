package cuda

/*
#include "shim.h"
*/
import "C"

import "fmt"

// Result is a CUresult, the status every driver API call returns. It
// implements error so that callers can test for a specific status with
// errors.Is(err, cuda.ResultNotReady).
type Result int

// Statuses this package and its callers test for. Values from cuda.h.
const (
	ResultSuccess               Result = 0
	ResultInvalidValue          Result = 1
	ResultOutOfMemory           Result = 2
	ResultNotInitialized        Result = 3
	ResultDeinitialized         Result = 4
	ResultNoDevice              Result = 100
	ResultInvalidDevice         Result = 101
	ResultInvalidImage          Result = 200
	ResultInvalidContext        Result = 201
	ResultInvalidPTX            Result = 218
	ResultUnsupportedPTXVersion Result = 222
	ResultInvalidHandle         Result = 400
	ResultNotFound              Result = 500
	ResultNotReady              Result = 600
	ResultIllegalAddress        Result = 700
	ResultLaunchOutOfResources  Result = 701
	ResultLaunchTimeout         Result = 702
	ResultLaunchFailed          Result = 719
	ResultNotPermitted          Result = 800
	ResultNotSupported          Result = 801
	ResultUnknown               Result = 999
)

// Name returns the driver's name for r (cuGetErrorName), such as
// "CUDA_ERROR_NO_DEVICE", or a numeric fallback when libcuda is not loaded or
// does not know r.
func (r Result) Name() string {
	if s := C.gp_error_name(C.CUresult(r)); s != nil {
		return C.GoString(s)
	}
	return fmt.Sprintf("CUresult(%d)", int(r))
}

// Description returns the driver's description of r (cuGetErrorString), or
// "" when unavailable.
func (r Result) Description() string {
	if s := C.gp_error_string(C.CUresult(r)); s != nil {
		return C.GoString(s)
	}
	return ""
}

func (r Result) Error() string {
	if d := r.Description(); d != "" {
		return fmt.Sprintf("%s (%d): %s", r.Name(), int(r), d)
	}
	return fmt.Sprintf("%s (%d)", r.Name(), int(r))
}

// Error is a failed driver call: which entry point failed and with what
// status. errors.Is(err, ResultX) matches on the status.
type Error struct {
	// Op is the driver entry point, e.g. "cuMemAlloc_v2".
	Op string
	// Code is the status it returned.
	Code Result
	// Log holds extra text from the driver where there is some, such as the
	// JIT compiler's error log for a module that failed to load.
	Log string
}

func (e *Error) Error() string {
	if e.Log != "" {
		return fmt.Sprintf("%s: %v\n%s", e.Op, e.Code, e.Log)
	}
	return fmt.Sprintf("%s: %v", e.Op, e.Code)
}

// Is reports whether target is the Result e carries.
func (e *Error) Is(target error) bool {
	r, ok := target.(Result)
	return ok && r == e.Code
}

// Unwrap exposes the status, so errors.As(err, &r) with r a Result works.
func (e *Error) Unwrap() error { return e.Code }

// check turns a CUresult into nil or an *Error naming op.
func check(op string, r C.CUresult) error {
	if r == 0 {
		return nil
	}
	return &Error{Op: op, Code: Result(r)}
}
