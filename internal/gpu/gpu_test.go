package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
)

func TestNull(t *testing.T) {
	var info Info = Null{}
	ctx := t.Context()
	if _, err := info.Driver(ctx); !errors.Is(err, ErrNoDriver) {
		t.Errorf("Driver() error = %v, want ErrNoDriver", err)
	}
	if devices, err := info.Devices(ctx); !errors.Is(err, ErrNoDriver) || devices != nil {
		t.Errorf("Devices() = %v, %v; want nil, ErrNoDriver", devices, err)
	}
	if err := info.Close(); err != nil {
		t.Errorf("Close() = %v, want nil", err)
	}
}

func testDevices() []Device {
	return []Device{
		{
			Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-00000000-0000-0000-0000-000000000000",
			PCIBusID: "00000000:19:00.0", MemoryTotal: 80 << 30, MemoryUsed: 1 << 30,
			Processes: []Process{{PID: 4242, UsedMemory: 512 << 20, Name: "python3"}},
		},
		{Index: 1, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-11111111-1111-1111-1111-111111111111", PCIBusID: "00000000:3B:00.0"},
	}
}

func TestMock(t *testing.T) {
	errBoom := errors.New("boom")
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	tests := []struct {
		name        string
		mock        *Mock
		ctx         context.Context
		closeFirst  bool
		wantDriver  DriverInfo
		wantDevices []Device
		wantErr     error
	}{
		{
			name:        "answers",
			mock:        &Mock{DriverInfo: DriverInfo{Version: "580.142", CUDADriverVersion: 13000}, DeviceList: testDevices()},
			wantDriver:  DriverInfo{Version: "580.142", CUDADriverVersion: 13000},
			wantDevices: testDevices(),
		},
		{name: "empty", mock: &Mock{}},
		{name: "errors", mock: &Mock{DriverErr: errBoom, DevicesErr: errBoom, DeviceList: testDevices()}, wantErr: errBoom},
		{name: "canceled", mock: &Mock{DeviceList: testDevices()}, ctx: canceled, wantErr: context.Canceled},
		{name: "closed", mock: &Mock{DeviceList: testDevices()}, closeFirst: true, wantErr: ErrClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := tt.ctx
			if ctx == nil {
				ctx = t.Context()
			}
			if tt.closeFirst {
				if err := tt.mock.Close(); err != nil {
					t.Fatalf("Close() = %v", err)
				}
			}
			driver, err := tt.mock.Driver(ctx)
			if !errors.Is(err, tt.wantErr) || driver != tt.wantDriver {
				t.Errorf("Driver() = %+v, %v; want %+v, %v", driver, err, tt.wantDriver, tt.wantErr)
			}
			devices, err := tt.mock.Devices(ctx)
			if !errors.Is(err, tt.wantErr) || !reflect.DeepEqual(devices, tt.wantDevices) {
				t.Errorf("Devices() = %+v, %v; want %+v, %v", devices, err, tt.wantDevices, tt.wantErr)
			}
		})
	}
}

func TestMockDevicesAreCopies(t *testing.T) {
	m := &Mock{DeviceList: testDevices()}
	first, err := m.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	first[0].Name = "changed"
	first[0].Processes[0].PID = 1
	second, err := m.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(second, testDevices()) {
		t.Errorf("editing one result changed the next: %+v", second)
	}
}

func TestMockClose(t *testing.T) {
	errClose := errors.New("close failed")
	m := &Mock{CloseErr: errClose}
	if m.Closed() {
		t.Fatal("Closed() before Close")
	}
	if err := m.Close(); !errors.Is(err, errClose) {
		t.Errorf("Close() = %v, want %v", err, errClose)
	}
	if !m.Closed() {
		t.Error("Closed() = false after Close")
	}
	if err := m.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close() = %v, want ErrClosed", err)
	}
}

// The JSON names are part of gpreemptctl's -o json output.
func TestDeviceJSON(t *testing.T) {
	got, err := json.Marshal(testDevices()[0])
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"index":0,"name":"NVIDIA H100 80GB HBM3","uuid":"GPU-00000000-0000-0000-0000-000000000000",` +
		`"pci_bus_id":"00000000:19:00.0","memory_total":85899345920,"memory_used":1073741824,` +
		`"processes":[{"pid":4242,"used_memory":536870912,"name":"python3"}]}`
	if string(got) != want {
		t.Errorf("json.Marshal(Device) =\n%s\nwant\n%s", got, want)
	}
	got, err = json.Marshal(DriverInfo{Version: "580.142", CUDADriverVersion: 13000})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"version":"580.142","cuda_driver_version":13000}`; string(got) != want {
		t.Errorf("json.Marshal(DriverInfo) = %s, want %s", got, want)
	}
}
