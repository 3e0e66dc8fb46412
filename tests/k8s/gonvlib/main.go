// Command gonvlib reads the node the way the Kubernetes GPU components do, through go-nvlib: nvpci's walk
// of /sys/bus/pci/devices and nvlib's device, MIG and info views over go-nvml. It prints one JSON
// document: {"pci", "gpus", "3d_controllers", "nvswitches", "network", "all_error", "devices", "devices_error",
// "mig_parse_errors", "info"}.
// A failed call is reported in the document (its error text), never as a crash, so the test can name it.
package main

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvlib/pkg/nvlib/info"
	"github.com/NVIDIA/go-nvlib/pkg/nvpci"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The PCI Express capability's Device Capabilities register and its FLR bit (PCIe base spec 7.5.3.3).
const (
	pciExpressCapability = 0x10
	pciExpressDevCap     = 0x04
	devCapFLR            = 1 << 28
)

type pciFunction struct {
	Address         string         `json:"address"`
	Vendor          uint16         `json:"vendor"`
	Device          uint16         `json:"device"`
	Class           uint32         `json:"class"`
	SubsystemVendor uint16         `json:"subsystem_vendor"`
	SubsystemDevice uint16         `json:"subsystem_device"`
	DeviceName      string         `json:"device_name"`
	Driver          string         `json:"driver"`
	IommuGroup      int            `json:"iommu_group"`
	NumaNode        int            `json:"numa_node"`
	BarSizes        map[int]uint64 `json:"bar_sizes"` // resource index -> bytes
	Addressable32   uint64         `json:"addressable_32"`
	Addressable64   uint64         `json:"addressable_64"`
	TotalVFs        *uint64        `json:"total_vfs"` // nil: not an SR-IOV physical function
	NumVFs          *uint64        `json:"num_vfs"`
	IsVF            bool           `json:"is_vf"`
	ResetAvailable  bool           `json:"reset_available"`
	FLRCapable      bool           `json:"flr_capable"` // DevCap's Function Level Reset bit, from config
	ConfigVendor    uint16         `json:"config_vendor"`
	ConfigDevice    uint16         `json:"config_device"`
	StandardCaps    []int          `json:"standard_caps"`
	ExtendedCaps    []int          `json:"extended_caps"`
	ConfigError     string         `json:"config_error,omitempty"`
}

type migDevice struct {
	UUID    string `json:"uuid"`
	Profile string `json:"profile"`
	Error   string `json:"error,omitempty"`
}

type gpu struct {
	Index             int         `json:"index"`
	UUID              string      `json:"uuid"`
	PCIBusID          string      `json:"pci_bus_id"`
	NvpciAddress      string      `json:"nvpci_address"` // nvpci's GetGPUByPciBusID of PCIBusID, or its error
	Architecture      string      `json:"architecture"`
	Brand             string      `json:"brand"`
	ComputeCapability string      `json:"compute_capability"`
	AddressingMode    string      `json:"addressing_mode"`
	Coherent          bool        `json:"coherent"`
	FabricAttached    bool        `json:"fabric_attached"`
	MigCapable        bool        `json:"mig_capable"`
	MigEnabled        bool        `json:"mig_enabled"`
	MigProfiles       []string    `json:"mig_profiles"`
	MigDevices        []migDevice `json:"mig_devices"`
	Errors            []string    `json:"errors"`
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func describe(d *nvpci.NvidiaPCIDevice) pciFunction {
	f := pciFunction{
		Address: d.Address, Vendor: d.Vendor, Device: d.Device, Class: d.Class,
		SubsystemVendor: d.SubsystemVendor, SubsystemDevice: d.SubsystemDevice, DeviceName: d.DeviceName,
		Driver: d.Driver, IommuGroup: d.IommuGroup, NumaNode: d.NumaNode, BarSizes: map[int]uint64{},
		IsVF: d.SriovInfo.IsVF(), ResetAvailable: d.IsResetAvailable(), StandardCaps: []int{}, ExtendedCaps: []int{},
	}
	for index, r := range d.Resources {
		f.BarSizes[index] = uint64(r.End-r.Start) + 1
	}
	f.Addressable32, f.Addressable64 = d.Resources.GetTotalAddressableMemory(false)
	if d.SriovInfo.IsPF() {
		f.TotalVFs, f.NumVFs = &d.SriovInfo.PhysicalFunction.TotalVFs, &d.SriovInfo.PhysicalFunction.NumVFs
	}
	config, err := d.Config.Read()
	if err != nil {
		f.ConfigError = err.Error()
		return f
	}
	f.ConfigVendor, f.ConfigDevice = config.GetVendorID(), config.GetDeviceID()
	caps, err := config.GetPCICapabilities()
	if err != nil {
		f.ConfigError = err.Error()
		return f
	}
	if express, ok := caps.Standard[pciExpressCapability]; ok {
		f.FLRCapable = express.Read32(pciExpressDevCap)&devCapFLR != 0
	}
	for id := range caps.Standard {
		f.StandardCaps = append(f.StandardCaps, int(id))
	}
	for id := range caps.Extended {
		f.ExtendedCaps = append(f.ExtendedCaps, int(id))
	}
	sort.Ints(f.StandardCaps)
	sort.Ints(f.ExtendedCaps)
	return f
}

func addresses(devices []*nvpci.NvidiaPCIDevice, err error) any {
	if err != nil {
		return err.Error()
	}
	out := []string{}
	for _, d := range devices {
		out = append(out, d.Address)
	}
	return out
}

func describeGPU(pci nvpci.Interface, i int, d device.Device) gpu {
	g := gpu{Index: i, MigProfiles: []string{}, MigDevices: []migDevice{}, Errors: []string{}}
	note := func(err error) {
		if err != nil {
			g.Errors = append(g.Errors, err.Error())
		}
	}
	var err error
	var ret nvml.Return
	if g.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		note(fmt.Errorf("GetUUID: %v", ret))
	}
	g.PCIBusID, err = d.GetPCIBusID()
	note(err)
	switch found, err := pci.GetGPUByPciBusID(g.PCIBusID); {
	case err != nil:
		g.NvpciAddress = err.Error()
	case found != nil:
		g.NvpciAddress = found.Address
	}
	g.Architecture, err = d.GetArchitectureAsString()
	note(err)
	g.Brand, err = d.GetBrandAsString()
	note(err)
	g.ComputeCapability, err = d.GetCudaComputeCapabilityAsString()
	note(err)
	g.AddressingMode, err = d.GetAddressingModeAsString()
	note(err)
	g.Coherent, err = d.IsCoherent()
	note(err)
	g.FabricAttached, err = d.IsFabricAttached()
	note(err)
	g.MigCapable, err = d.IsMigCapable()
	note(err)
	g.MigEnabled, err = d.IsMigEnabled()
	note(err)
	profiles, err := d.GetMigProfiles()
	note(err)
	for _, p := range profiles {
		g.MigProfiles = append(g.MigProfiles, p.String())
	}
	note(d.VisitMigDevices(func(_ int, m device.MigDevice) error {
		uuid, _ := m.GetUUID()
		profile, err := m.GetProfile()
		entry := migDevice{UUID: uuid, Error: errText(err)}
		if err == nil {
			entry.Profile = profile.String()
		}
		g.MigDevices = append(g.MigDevices, entry)
		return nil
	}))
	return g
}

// parseErrors parses every profile name a GPU offered back into a profile, as mig-parted and the device
// plugin resolve the names in their configs; it lists the names that do not come back as themselves.
func parseErrors(devicelib device.Interface, devices []gpu) []string {
	failed := []string{}
	for _, g := range devices {
		for _, name := range g.MigProfiles {
			profile, err := devicelib.ParseMigProfile(name)
			if err != nil {
				failed = append(failed, fmt.Sprintf("%s: %v", name, err))
			} else if profile.String() != name {
				failed = append(failed, fmt.Sprintf("%s: parsed as %s", name, profile))
			}
		}
	}
	return failed
}

func main() {
	doc := map[string]any{}
	pci := nvpci.New()
	all, err := pci.GetAllDevices()
	doc["all_error"] = errText(err)
	functions := []pciFunction{}
	for _, d := range all {
		functions = append(functions, describe(d))
	}
	doc["pci"] = functions
	doc["gpus"] = addresses(pci.GetGPUs())
	doc["3d_controllers"] = addresses(pci.Get3DControllers())
	doc["nvswitches"] = addresses(pci.GetNVSwitches())
	doc["network"] = addresses(pci.GetNetworkControllers())

	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		doc["devices_error"] = fmt.Sprintf("nvml.Init: %v", ret)
	} else {
		devices := []gpu{}
		devicelib := device.New(lib)
		doc["devices_error"] = errText(devicelib.VisitDevices(func(i int, d device.Device) error {
			devices = append(devices, describeGPU(pci, i, d))
			return nil
		}))
		doc["devices"] = devices
		doc["mig_parse_errors"] = parseErrors(devicelib, devices)
		lib.Shutdown()
	}

	props := info.New()
	hasNvml, _ := props.HasNvml()
	hasTegra, _ := props.HasTegraFiles()
	hasDXCore, _ := props.HasDXCore()
	integrated, reason := props.HasAnIntegratedGPU()
	doc["info"] = map[string]any{"has_nvml": hasNvml, "has_tegra_files": hasTegra, "has_dxcore": hasDXCore,
		"has_integrated_gpu": integrated, "integrated_reason": reason, "platform": string(props.ResolvePlatform())}

	out, _ := json.Marshal(doc)
	fmt.Println(string(out))
}
