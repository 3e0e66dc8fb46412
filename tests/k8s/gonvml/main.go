// Command gonvml calls every device getter of go-nvml's Device interface on every GPU and prints one
// JSON line per call: {"gpu", "call", "return", "value"} (return is the NVML code's text, or "absent"
// when the library does not export the function, as a real driver of that release does not; value is
// the results of a successful call). Before each call it prints {"gpu", "calling"}, so a crash
// inside a call names the call. Exit 1 on a failed init.
//
// With -events N it instead watches Xid and ECC events on every GPU the way the Kubernetes device plugin's
// health check does (one event set, 5 s waits, the event device's UUID looked up on its existing handle),
// prints {"gpu", "uuid"} per GPU, then {"ready"}, then one {"event_type", "xid", "uuid", "uuid_return"}
// line per event, and exits after N events or -timeout.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type call struct {
	name   string
	symbol string
	invoke func() []reflect.Value
}

var returnType = reflect.TypeOf(nvml.SUCCESS)

func emit(fields map[string]any) {
	line, _ := json.Marshal(fields)
	fmt.Fprintln(os.Stdout, string(line)) // os.Stdout is unbuffered: a line is out before the next call
}

// getters are the interface's Get*/Is* methods that take no argument beyond the receiver.
func getters(device nvml.Device) []call {
	iface := reflect.TypeOf((*nvml.Device)(nil)).Elem()
	value := reflect.ValueOf(device)
	var calls []call
	for i := 0; i < iface.NumMethod(); i++ {
		method := iface.Method(i)
		if method.Type.NumIn() != 0 || !(strings.HasPrefix(method.Name, "Get") || strings.HasPrefix(method.Name, "Is")) {
			continue
		}
		if method.Type.NumOut() == 0 || method.Type.Out(method.Type.NumOut()-1) != returnType {
			continue // a handler object, not a call
		}
		bound := value.MethodByName(method.Name)
		calls = append(calls, call{method.Name, "nvmlDevice" + method.Name, func() []reflect.Value { return bound.Call(nil) }})
	}
	return calls
}

func returned(values ...any) []reflect.Value {
	out := make([]reflect.Value, len(values))
	for i, v := range values {
		out[i] = reflect.ValueOf(v)
	}
	return out
}

// withArguments are the getters that need simple arguments, with the arguments a monitoring agent passes.
func withArguments(device nvml.Device, first nvml.Device) []call {
	d := device
	c := func(name string, f func() []reflect.Value) call {
		symbol := "nvmlDevice" + strings.SplitN(name, "(", 2)[0]
		return call{name, symbol, f}
	}
	return []call{
		c("GetClockInfo(SM)", func() []reflect.Value { return returned(d.GetClockInfo(nvml.CLOCK_SM)) }),
		c("GetClockInfo(MEM)", func() []reflect.Value { return returned(d.GetClockInfo(nvml.CLOCK_MEM)) }),
		c("GetMaxClockInfo(GRAPHICS)", func() []reflect.Value { return returned(d.GetMaxClockInfo(nvml.CLOCK_GRAPHICS)) }),
		c("GetMaxCustomerBoostClock(GRAPHICS)", func() []reflect.Value { return returned(d.GetMaxCustomerBoostClock(nvml.CLOCK_GRAPHICS)) }),
		c("GetApplicationsClock(GRAPHICS)", func() []reflect.Value { return returned(d.GetApplicationsClock(nvml.CLOCK_GRAPHICS)) }),
		c("GetDefaultApplicationsClock(GRAPHICS)", func() []reflect.Value { return returned(d.GetDefaultApplicationsClock(nvml.CLOCK_GRAPHICS)) }),
		c("GetClock(SM,CURRENT)", func() []reflect.Value { return returned(d.GetClock(nvml.CLOCK_SM, nvml.CLOCK_ID_CURRENT)) }),
		c("GetTemperature(GPU)", func() []reflect.Value { return returned(d.GetTemperature(nvml.TEMPERATURE_GPU)) }),
		c("GetTemperatureThreshold(SHUTDOWN)", func() []reflect.Value {
			return returned(d.GetTemperatureThreshold(nvml.TEMPERATURE_THRESHOLD_SHUTDOWN))
		}),
		c("GetTemperatureThreshold(SLOWDOWN)", func() []reflect.Value {
			return returned(d.GetTemperatureThreshold(nvml.TEMPERATURE_THRESHOLD_SLOWDOWN))
		}),
		c("GetThermalSettings(0)", func() []reflect.Value { return returned(d.GetThermalSettings(0)) }),
		c("GetFanSpeed_v2(0)", func() []reflect.Value { return returned(d.GetFanSpeed_v2(0)) }),
		c("GetTotalEccErrors(UNCORRECTED,VOLATILE)", func() []reflect.Value {
			return returned(d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC))
		}),
		c("GetDetailedEccErrors(CORRECTED,AGGREGATE)", func() []reflect.Value {
			return returned(d.GetDetailedEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC))
		}),
		c("GetMemoryErrorCounter(UNCORRECTED,VOLATILE,DEVICE_MEMORY)", func() []reflect.Value {
			return returned(d.GetMemoryErrorCounter(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC, nvml.MEMORY_LOCATION_DEVICE_MEMORY))
		}),
		c("GetRetiredPages(DOUBLE_BIT)", func() []reflect.Value {
			return returned(d.GetRetiredPages(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))
		}),
		c("GetRetiredPages_v2(DOUBLE_BIT)", func() []reflect.Value {
			return returned(d.GetRetiredPages_v2(nvml.PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR))
		}),
		c("GetCpuAffinity(4)", func() []reflect.Value { return returned(d.GetCpuAffinity(4)) }),
		c("GetCpuAffinityWithinScope(4,NODE)", func() []reflect.Value { return returned(d.GetCpuAffinityWithinScope(4, nvml.AFFINITY_SCOPE_NODE)) }),
		c("GetMemoryAffinity(4,NODE)", func() []reflect.Value { return returned(d.GetMemoryAffinity(4, nvml.AFFINITY_SCOPE_NODE)) }),
		c("GetTopologyCommonAncestor(gpu0)", func() []reflect.Value { return returned(d.GetTopologyCommonAncestor(first)) }),
		c("GetTopologyNearestGpus(SYSTEM)", func() []reflect.Value { return returned(d.GetTopologyNearestGpus(nvml.TOPOLOGY_SYSTEM)) }),
		c("GetP2PStatus(gpu0,NVLINK)", func() []reflect.Value { return returned(d.GetP2PStatus(first, nvml.P2P_CAPS_INDEX_NVLINK)) }),
		c("GetP2PStatus(gpu0,READ)", func() []reflect.Value { return returned(d.GetP2PStatus(first, nvml.P2P_CAPS_INDEX_READ)) }),
		c("GetNvLinkState(0)", func() []reflect.Value { return returned(d.GetNvLinkState(0)) }),
		c("GetNvLinkVersion(0)", func() []reflect.Value { return returned(d.GetNvLinkVersion(0)) }),
		c("GetNvLinkCapability(0,P2P_SUPPORTED)", func() []reflect.Value { return returned(d.GetNvLinkCapability(0, nvml.NVLINK_CAP_P2P_SUPPORTED)) }),
		c("GetNvLinkRemotePciInfo(0)", func() []reflect.Value { return returned(d.GetNvLinkRemotePciInfo(0)) }),
		c("GetNvLinkRemoteDeviceType(0)", func() []reflect.Value { return returned(d.GetNvLinkRemoteDeviceType(0)) }),
		c("GetNvLinkErrorCounter(0,DL_REPLAY)", func() []reflect.Value { return returned(d.GetNvLinkErrorCounter(0, nvml.NVLINK_ERROR_DL_REPLAY)) }),
		c("GetPcieThroughput(TX)", func() []reflect.Value { return returned(d.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES)) }),
		c("GetInforomVersion(OEM)", func() []reflect.Value { return returned(d.GetInforomVersion(nvml.INFOROM_OEM)) }),
		c("GetViolationStatus(POWER)", func() []reflect.Value { return returned(d.GetViolationStatus(nvml.PERF_POLICY_POWER)) }),
		c("GetEncoderCapacity(H264)", func() []reflect.Value { return returned(d.GetEncoderCapacity(nvml.ENCODER_QUERY_H264)) }),
		c("GetSamples(GPU_UTILIZATION,0)", func() []reflect.Value { return returned(d.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, 0)) }),
		c("GetProcessUtilization(0)", func() []reflect.Value { return returned(d.GetProcessUtilization(0)) }),
		c("GetSupportedGraphicsClocks(0)", func() []reflect.Value { return returned(d.GetSupportedGraphicsClocks(0)) }),
		c("GetMinMaxClockOfPState(GRAPHICS,P0)", func() []reflect.Value { return returned(d.GetMinMaxClockOfPState(nvml.CLOCK_GRAPHICS, nvml.PSTATE_0)) }),
		c("GetGpuInstanceProfileInfo(0)", func() []reflect.Value { return returned(d.GetGpuInstanceProfileInfo(0)) }),
		c("GetMigDeviceHandleByIndex(0)", func() []reflect.Value { return returned(d.GetMigDeviceHandleByIndex(0)) }),
		c("GetFieldValues(ECC_CURRENT,POWER_USAGE)", func() []reflect.Value {
			values := []nvml.FieldValue{{FieldId: nvml.FI_DEV_ECC_CURRENT}, {FieldId: nvml.FI_DEV_POWER_INSTANT}}
			return returned(d.GetFieldValues(values))
		}),
	}
}

// values is a call's results before its Return: the one result, or all of them as a list; nil when a
// result has no JSON form.
func values(results []reflect.Value) any {
	plain := make([]any, len(results))
	for i, r := range results {
		plain[i] = r.Interface()
	}
	var value any = plain
	if len(plain) == 1 {
		value = plain[0]
	}
	if _, err := json.Marshal(value); err != nil {
		return nil
	}
	return value
}

func watchEvents(lib nvml.Interface, count int, want int, timeout time.Duration) {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		fmt.Fprintf(os.Stderr, "EventSetCreate: %v\n", ret)
		os.Exit(1)
	}
	defer set.Free()
	kinds := uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeDoubleBitEccError | nvml.EventTypeSingleBitEccError)
	for i := 0; i < count; i++ {
		device, _ := lib.DeviceGetHandleByIndex(i)
		uuid, _ := device.GetUUID()
		if ret := device.RegisterEvents(kinds, set); ret != nvml.SUCCESS {
			fmt.Fprintf(os.Stderr, "RegisterEvents on GPU %d: %v\n", i, ret)
			os.Exit(1)
		}
		emit(map[string]any{"gpu": i, "uuid": uuid})
	}
	emit(map[string]any{"ready": true})
	deadline := time.Now().Add(timeout)
	for seen := 0; seen < want && time.Now().Before(deadline); {
		event, ret := set.Wait(5000)
		if ret == nvml.ERROR_TIMEOUT {
			continue
		}
		if ret != nvml.SUCCESS {
			emit(map[string]any{"wait_return": ret.String()})
			os.Exit(1)
		}
		uuid, uuidRet := event.Device.GetUUID()
		emit(map[string]any{"event_type": event.EventType, "xid": event.EventData, "uuid": uuid,
			"uuid_return": uuidRet.String()})
		seen++
	}
}

func main() {
	events := flag.Int("events", 0, "watch for this many events instead of calling the getters")
	timeout := flag.Duration("timeout", 30*time.Second, "give up watching after this long")
	flag.Parse()
	lib := nvml.New()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		fmt.Fprintf(os.Stderr, "nvml.Init: %v\n", ret)
		os.Exit(1)
	}
	defer lib.Shutdown()
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		fmt.Fprintf(os.Stderr, "DeviceGetCount: %v\n", ret)
		os.Exit(1)
	}
	emit(map[string]any{"count": count})
	if *events > 0 {
		watchEvents(lib, count, *events, *timeout)
		return
	}
	first, _ := lib.DeviceGetHandleByIndex(0)
	for i := 0; i < count; i++ {
		device, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			emit(map[string]any{"gpu": i, "call": "DeviceGetHandleByIndex", "return": ret.String()})
			continue
		}
		for _, c := range append(getters(device), withArguments(device, first)...) {
			if lib.Extensions().LookupSymbol(c.symbol) != nil {
				emit(map[string]any{"gpu": i, "call": c.name, "return": "absent"})
				continue
			}
			emit(map[string]any{"gpu": i, "calling": c.name})
			out := c.invoke()
			code := out[len(out)-1].Interface().(nvml.Return)
			result := map[string]any{"gpu": i, "call": c.name, "return": code.String()}
			if code == nvml.SUCCESS && len(out) > 1 {
				result["value"] = values(out[:len(out)-1])
			}
			emit(result)
		}
	}
}
