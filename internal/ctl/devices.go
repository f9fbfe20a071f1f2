package ctl

import (
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"
	"github.com/gpreempt/gpreempt/internal/gpu"
)

var devicesCommand = &cli.Command{
	Name:  "devices",
	Usage: "list GPUs, the driver, and the compute processes on each (NVML)",
	Action: func(c *cli.Context) error {
		r := rt(c)
		info, err := r.env.GPU(r.log)
		if err != nil {
			return err
		}
		defer info.Close()
		drv, err := info.Driver(c.Context)
		if err != nil {
			return err
		}
		devs, err := info.Devices(c.Context)
		if err != nil {
			return err
		}
		if r.json {
			return cmdutil.WriteJSON(c.App.Writer, struct {
				Driver  gpu.DriverInfo `json:"driver"`
				Devices []gpu.Device   `json:"devices"`
			}{drv, devs})
		}
		fmt.Fprintf(c.App.Writer, "driver %s, CUDA %d.%d\n", drv.Version, drv.CUDADriverVersion/1000, drv.CUDADriverVersion%1000/10)
		tw := tabwriter.NewWriter(c.App.Writer, 0, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "GPU\tNAME\tUUID\tBUS\tMEMORY USED/TOTAL\tPROCESSES")
		for _, d := range devs {
			procs := ""
			for i, p := range d.Processes {
				if i > 0 {
					procs += " "
				}
				procs += fmt.Sprintf("%d(%s)", p.PID, cmdutil.OrDash(p.Name))
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d/%d MiB\t%s\n", d.Index, d.Name, d.UUID, d.PCIBusID,
				d.MemoryUsed>>20, d.MemoryTotal>>20, cmdutil.OrDash(procs))
		}
		return tw.Flush()
	},
}
