// Command dpclient is a kubelet's side of the device-plugin v1beta1 gRPC API, for one plugin process
// serving one socket per resource in -dir (the NVIDIA plugin names them nvidia-<resource>.sock).
//
// For each resource of -resources it waits for the socket, calls GetDevicePluginOptions, reads the first
// ListAndWatch response (devices, health, NUMA topology), asks GetPreferredAllocation for each size of
// -preferred out of all devices, and calls Allocate for each device alone and for all of them together.
// With -then it then runs the shell command, collects ListAndWatch updates until -updates arrived (or
// -timeout), keeps reading for -settle, and with -after-preferred asks GetPreferredAllocation again out of
// the devices still healthy, as a kubelet would. It prints one JSON document.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type device struct {
	ID     string  `json:"id"`
	Health string  `json:"health"`
	NUMA   []int64 `json:"numa"` // nil: the plugin gave no topology
}

type allocation struct {
	IDs         []string          `json:"ids"`
	Error       string            `json:"error,omitempty"`
	Envs        map[string]string `json:"envs,omitempty"`
	Mounts      []map[string]any  `json:"mounts,omitempty"`
	Devices     []map[string]any  `json:"devices,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	CDIDevices  []string          `json:"cdi_devices,omitempty"`
}

type preferred struct {
	Size  int      `json:"size"`
	IDs   []string `json:"ids,omitempty"`
	Error string   `json:"error,omitempty"`
}

type resource struct {
	Options   map[string]bool `json:"options"`
	Devices   []device        `json:"devices"`
	Preferred []preferred     `json:"preferred"`
	Allocate  []allocation    `json:"allocate"`
	After     []preferred     `json:"after_preferred,omitempty"`

	client pluginapi.DevicePluginClient
	latest []device
}

type update struct {
	Resource string   `json:"resource"`
	Devices  []device `json:"devices"`
}

type report struct {
	Resources map[string]*resource `json:"resources"`
	Then      map[string]any       `json:"then,omitempty"`
	Updates   []update             `json:"updates"`
	Sockets   []string             `json:"sockets"`
	Error     string               `json:"error,omitempty"`
}

func devices(response *pluginapi.ListAndWatchResponse) []device {
	var out []device
	for _, d := range response.Devices {
		entry := device{ID: d.ID, Health: d.Health}
		if d.Topology != nil {
			entry.NUMA = []int64{}
			for _, node := range d.Topology.Nodes {
				entry.NUMA = append(entry.NUMA, node.ID)
			}
		}
		out = append(out, entry)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func ids(list []device, healthyOnly bool) []string {
	var out []string
	for _, d := range list {
		if !healthyOnly || d.Health == pluginapi.Healthy {
			out = append(out, d.ID)
		}
	}
	return out
}

func connect(ctx context.Context, socket string) (*grpc.ClientConn, error) {
	for {
		if _, err := os.Stat(socket); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s did not appear: %w", socket, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	return grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

func askPreferred(ctx context.Context, client pluginapi.DevicePluginClient, available []string, size int) preferred {
	request := &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{
		{AvailableDeviceIDs: available, AllocationSize: int32(size)}}}
	response, err := client.GetPreferredAllocation(ctx, request)
	if err != nil {
		return preferred{Size: size, Error: err.Error()}
	}
	chosen := response.ContainerResponses[0].DeviceIDs
	sort.Strings(chosen)
	return preferred{Size: size, IDs: chosen}
}

func allocate(ctx context.Context, client pluginapi.DevicePluginClient, chosen []string) allocation {
	request := &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: chosen}}}
	response, err := client.Allocate(ctx, request)
	if err != nil {
		return allocation{IDs: chosen, Error: err.Error()}
	}
	r := response.ContainerResponses[0]
	out := allocation{IDs: chosen, Envs: r.Envs, Annotations: r.Annotations}
	for _, m := range r.Mounts {
		out.Mounts = append(out.Mounts, map[string]any{"container_path": m.ContainerPath, "host_path": m.HostPath,
			"read_only": m.ReadOnly})
	}
	for _, d := range r.Devices {
		out.Devices = append(out.Devices, map[string]any{"container_path": d.ContainerPath, "host_path": d.HostPath,
			"permissions": d.Permissions})
	}
	for _, c := range r.CdiDevices {
		out.CDIDevices = append(out.CDIDevices, c.Name)
	}
	return out
}

func sizes(text string) []int {
	var out []int
	for _, field := range strings.Split(text, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(field)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

func run(r *report) error {
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the directory of the plugin's sockets")
	names := flag.String("resources", "gpu", "resources to query, comma-separated (socket nvidia-<resource>.sock)")
	sizeList := flag.String("preferred", "", "GetPreferredAllocation sizes, comma-separated")
	then := flag.String("then", "", "a shell command to run after the first lists")
	updates := flag.Int("updates", 0, "ListAndWatch updates to wait for after -then")
	settle := flag.Duration("settle", 0, "how long to keep reading updates after the last expected one")
	afterSize := flag.String("after-preferred", "", "GetPreferredAllocation sizes out of the healthy devices, after the updates")
	timeout := flag.Duration("timeout", 60*time.Second, "the whole run's limit")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	type received struct {
		name    string
		devices []device
		err     error
	}
	stream := make(chan received, 64)
	order := strings.Split(*names, ",")
	for _, name := range order {
		conn, err := connect(ctx, filepath.Join(*dir, "nvidia-"+name+".sock"))
		if err != nil {
			return err
		}
		defer conn.Close()
		res := &resource{client: pluginapi.NewDevicePluginClient(conn)}
		r.Resources[name] = res
		options, err := res.client.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
		if err != nil {
			return fmt.Errorf("%s: GetDevicePluginOptions: %w", name, err)
		}
		res.Options = map[string]bool{"pre_start_required": options.PreStartRequired,
			"get_preferred_allocation_available": options.GetPreferredAllocationAvailable}
		watch, err := res.client.ListAndWatch(ctx, &pluginapi.Empty{})
		if err != nil {
			return fmt.Errorf("%s: ListAndWatch: %w", name, err)
		}
		first, err := watch.Recv()
		if err != nil {
			return fmt.Errorf("%s: ListAndWatch: %w", name, err)
		}
		res.Devices = devices(first)
		res.latest = res.Devices
		go func(name string) {
			for {
				response, err := watch.Recv()
				if err != nil {
					stream <- received{name: name, err: err}
					return
				}
				stream <- received{name: name, devices: devices(response)}
			}
		}(name)
		all := ids(res.Devices, false)
		for _, size := range sizes(*sizeList) {
			res.Preferred = append(res.Preferred, askPreferred(ctx, res.client, all, size))
		}
		for _, id := range all {
			res.Allocate = append(res.Allocate, allocate(ctx, res.client, []string{id}))
		}
		if len(all) > 1 {
			res.Allocate = append(res.Allocate, allocate(ctx, res.client, all))
		}
	}

	if *then != "" {
		output, err := exec.CommandContext(ctx, "sh", "-c", *then).CombinedOutput()
		r.Then = map[string]any{"command": *then, "output": string(output), "exit": 0}
		if err != nil {
			r.Then["exit"] = err.Error()
		}
		var quiet <-chan time.Time
		if *updates == 0 {
			quiet = time.After(*settle)
		}
	collect:
		for {
			select {
			case got := <-stream:
				if got.err != nil {
					return fmt.Errorf("%s: ListAndWatch ended: %w", got.name, got.err)
				}
				r.Resources[got.name].latest = got.devices
				r.Updates = append(r.Updates, update{Resource: got.name, Devices: got.devices})
				if len(r.Updates) == *updates {
					quiet = time.After(*settle)
				}
			case <-quiet:
				break collect
			case <-ctx.Done():
				if len(r.Updates) < *updates {
					return fmt.Errorf("%d of %d ListAndWatch updates before the timeout", len(r.Updates), *updates)
				}
				break collect
			}
		}
		for _, name := range order {
			res := r.Resources[name]
			for _, size := range sizes(*afterSize) {
				res.After = append(res.After, askPreferred(ctx, res.client, ids(res.latest, true), size))
			}
		}
	}
	entries, _ := os.ReadDir(*dir)
	for _, entry := range entries {
		r.Sockets = append(r.Sockets, entry.Name())
	}
	return nil
}

func main() {
	r := &report{Resources: map[string]*resource{}, Updates: []update{}}
	err := run(r)
	if err != nil {
		r.Error = err.Error()
	}
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	if err != nil {
		os.Exit(1)
	}
}
