package gpu

import (
	"context"
	"sync"
)

// Mock is an Info whose answers the test sets in its fields. Like the real
// implementation it honours a done ctx and refuses calls after Close, so
// that tests catch consumers that misuse either.
type Mock struct {
	DriverInfo DriverInfo
	DeviceList []Device
	// DriverErr, DevicesErr and CloseErr, when set, are returned by the
	// call of the same name instead of the fields above.
	DriverErr  error
	DevicesErr error
	CloseErr   error
	// Readings are returned by Reading in turn, the last one repeated;
	// ReadingErr, when set, is returned instead.
	Readings   []Reading
	ReadingErr error
	readings   int

	mu     sync.Mutex
	closed bool
}

var (
	_ Info      = (*Mock)(nil)
	_ Telemetry = (*Mock)(nil)
)

// Reading returns the next of Readings, whatever the index.
func (m *Mock) Reading(ctx context.Context, _ int) (Reading, error) {
	if err := m.usable(ctx); err != nil {
		return Reading{}, err
	}
	if m.ReadingErr != nil {
		return Reading{}, m.ReadingErr
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.Readings) == 0 {
		return Reading{}, nil
	}
	r := m.Readings[min(m.readings, len(m.Readings)-1)]
	m.readings++
	return r, nil
}

func (m *Mock) Driver(ctx context.Context) (DriverInfo, error) {
	if err := m.usable(ctx); err != nil {
		return DriverInfo{}, err
	}
	if m.DriverErr != nil {
		return DriverInfo{}, m.DriverErr
	}
	return m.DriverInfo, nil
}

// Devices returns a deep copy of DeviceList, so a consumer that edits its
// result cannot change what the next call returns.
func (m *Mock) Devices(ctx context.Context) ([]Device, error) {
	if err := m.usable(ctx); err != nil {
		return nil, err
	}
	if m.DevicesErr != nil {
		return nil, m.DevicesErr
	}
	if m.DeviceList == nil {
		return nil, nil
	}
	devices := make([]Device, len(m.DeviceList))
	for i, d := range m.DeviceList {
		if d.Processes != nil {
			d.Processes = append([]Process(nil), d.Processes...)
		}
		devices[i] = d
	}
	return devices, nil
}

// Close marks the mock closed and returns CloseErr; a second Close returns
// ErrClosed, as the real implementation's does.
func (m *Mock) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.closed = true
	return m.CloseErr
}

// Closed reports whether Close has been called, for tests that check the
// consumer released its Info.
func (m *Mock) Closed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

func (m *Mock) usable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.Closed() {
		return ErrClosed
	}
	return nil
}
