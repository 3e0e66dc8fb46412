// nri-runtime-check plays the container runtime's side of NRI with the real
// containerd ttrpc library (Debian's golang-github-containerd-ttrpc-dev), so the
// Python plugin is checked against ttrpc as containerd speaks it, not only
// against Mokka's own Python runtime double.
//
// Usage: nri-runtime-check SOCKET NAMESPACE ENV...
// Listens on SOCKET, accepts one plugin, serves Runtime.RegisterPlugin on mux
// conn 2, calls Plugin.Configure, Plugin.Synchronize and Plugin.CreateContainer
// on mux conn 1 (for a container with ENV in a pod of NAMESPACE), prints one JSON
// line describing the registration and the adjustment, and exits.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/containerd/ttrpc"
)

// --- the NRI v1alpha1 messages used, with gogo/protobuf struct tags ---------

type RegisterPluginRequest struct {
	PluginName string `protobuf:"bytes,1,opt,name=plugin_name,proto3"`
	PluginIdx  string `protobuf:"bytes,2,opt,name=plugin_idx,proto3"`
}

type Empty struct{}

type ConfigureRequest struct {
	Config              string `protobuf:"bytes,1,opt,name=config,proto3"`
	RuntimeName         string `protobuf:"bytes,2,opt,name=runtime_name,proto3"`
	RuntimeVersion      string `protobuf:"bytes,3,opt,name=runtime_version,proto3"`
	RegistrationTimeout int64  `protobuf:"varint,4,opt,name=registration_timeout,proto3"`
	RequestTimeout      int64  `protobuf:"varint,5,opt,name=request_timeout,proto3"`
}

type ConfigureResponse struct {
	Events         int32 `protobuf:"varint,2,opt,name=events,proto3"`
	RequestTimeout int64 `protobuf:"varint,3,opt,name=request_timeout,proto3"`
}

type SynchronizeRequest struct {
	More bool `protobuf:"varint,3,opt,name=more,proto3"`
}

type SynchronizeResponse struct {
	More bool `protobuf:"varint,2,opt,name=more,proto3"`
}

type PodSandbox struct {
	Id          string            `protobuf:"bytes,1,opt,name=id,proto3"`
	Name        string            `protobuf:"bytes,2,opt,name=name,proto3"`
	Namespace   string            `protobuf:"bytes,4,opt,name=namespace,proto3"`
	Annotations map[string]string `protobuf:"bytes,6,rep,name=annotations,proto3" protobuf_key:"bytes,1,opt,name=key,proto3" protobuf_val:"bytes,2,opt,name=value,proto3"`
}

type Container struct {
	Id   string   `protobuf:"bytes,1,opt,name=id,proto3"`
	Name string   `protobuf:"bytes,3,opt,name=name,proto3"`
	Env  []string `protobuf:"bytes,8,rep,name=env,proto3"`
}

type CreateContainerRequest struct {
	Pod       *PodSandbox `protobuf:"bytes,1,opt,name=pod,proto3"`
	Container *Container  `protobuf:"bytes,2,opt,name=container,proto3"`
}

type Mount struct {
	Destination string   `protobuf:"bytes,1,opt,name=destination,proto3" json:"destination"`
	Type        string   `protobuf:"bytes,2,opt,name=type,proto3" json:"type"`
	Source      string   `protobuf:"bytes,3,opt,name=source,proto3" json:"source"`
	Options     []string `protobuf:"bytes,4,rep,name=options,proto3" json:"options"`
}

type KeyValue struct {
	Key   string `protobuf:"bytes,1,opt,name=key,proto3" json:"key"`
	Value string `protobuf:"bytes,2,opt,name=value,proto3" json:"value"`
}

type LinuxDevice struct {
	Path  string `protobuf:"bytes,1,opt,name=path,proto3" json:"path"`
	Type  string `protobuf:"bytes,2,opt,name=type,proto3" json:"type"`
	Major int64  `protobuf:"varint,3,opt,name=major,proto3" json:"major"`
	Minor int64  `protobuf:"varint,4,opt,name=minor,proto3" json:"minor"`
}

type LinuxContainerAdjustment struct {
	Devices []*LinuxDevice `protobuf:"bytes,1,rep,name=devices,proto3" json:"devices"`
}

type ContainerAdjustment struct {
	Mounts []*Mount                  `protobuf:"bytes,3,rep,name=mounts,proto3" json:"mounts"`
	Env    []*KeyValue               `protobuf:"bytes,4,rep,name=env,proto3" json:"env"`
	Linux  *LinuxContainerAdjustment `protobuf:"bytes,6,opt,name=linux,proto3" json:"linux"`
}

type CreateContainerResponse struct {
	Adjust *ContainerAdjustment `protobuf:"bytes,1,opt,name=adjust,proto3"`
}

// gogo/protobuf's proto.Message
func (m *RegisterPluginRequest) Reset()         { *m = RegisterPluginRequest{} }
func (m *RegisterPluginRequest) String() string { return fmt.Sprintf("%+v", *m) }
func (*RegisterPluginRequest) ProtoMessage()    {}
func (m *Empty) Reset()                         { *m = Empty{} }
func (m *Empty) String() string                 { return "{}" }
func (*Empty) ProtoMessage()                    {}
func (m *ConfigureRequest) Reset()              { *m = ConfigureRequest{} }
func (m *ConfigureRequest) String() string      { return fmt.Sprintf("%+v", *m) }
func (*ConfigureRequest) ProtoMessage()         {}
func (m *ConfigureResponse) Reset()             { *m = ConfigureResponse{} }
func (m *ConfigureResponse) String() string     { return fmt.Sprintf("%+v", *m) }
func (*ConfigureResponse) ProtoMessage()        {}
func (m *SynchronizeRequest) Reset()            { *m = SynchronizeRequest{} }
func (m *SynchronizeRequest) String() string    { return fmt.Sprintf("%+v", *m) }
func (*SynchronizeRequest) ProtoMessage()       {}
func (m *SynchronizeResponse) Reset()           { *m = SynchronizeResponse{} }
func (m *SynchronizeResponse) String() string   { return fmt.Sprintf("%+v", *m) }
func (*SynchronizeResponse) ProtoMessage()      {}
func (m *PodSandbox) Reset()                    { *m = PodSandbox{} }
func (m *PodSandbox) String() string            { return fmt.Sprintf("%+v", *m) }
func (*PodSandbox) ProtoMessage()               {}
func (m *Container) Reset()                     { *m = Container{} }
func (m *Container) String() string             { return fmt.Sprintf("%+v", *m) }
func (*Container) ProtoMessage()                {}
func (m *CreateContainerRequest) Reset()        { *m = CreateContainerRequest{} }
func (m *CreateContainerRequest) String() string {
	return fmt.Sprintf("%+v", *m)
}
func (*CreateContainerRequest) ProtoMessage()      {}
func (m *Mount) Reset()                            { *m = Mount{} }
func (m *Mount) String() string                    { return fmt.Sprintf("%+v", *m) }
func (*Mount) ProtoMessage()                       {}
func (m *KeyValue) Reset()                         { *m = KeyValue{} }
func (m *KeyValue) String() string                 { return fmt.Sprintf("%+v", *m) }
func (*KeyValue) ProtoMessage()                    {}
func (m *LinuxDevice) Reset()                      { *m = LinuxDevice{} }
func (m *LinuxDevice) String() string              { return fmt.Sprintf("%+v", *m) }
func (*LinuxDevice) ProtoMessage()                 {}
func (m *LinuxContainerAdjustment) Reset()         { *m = LinuxContainerAdjustment{} }
func (m *LinuxContainerAdjustment) String() string { return fmt.Sprintf("%+v", *m) }
func (*LinuxContainerAdjustment) ProtoMessage()    {}
func (m *ContainerAdjustment) Reset()              { *m = ContainerAdjustment{} }
func (m *ContainerAdjustment) String() string      { return fmt.Sprintf("%+v", *m) }
func (*ContainerAdjustment) ProtoMessage()         {}
func (m *CreateContainerResponse) Reset()          { *m = CreateContainerResponse{} }
func (m *CreateContainerResponse) String() string  { return fmt.Sprintf("%+v", *m) }
func (*CreateContainerResponse) ProtoMessage()     {}

// --- NRI's connection multiplexer: frames of conn id (u32 BE) | length (u32 BE) | payload ---

const (
	pluginServiceConn  = 1
	runtimeServiceConn = 2
)

type mux struct {
	trunk net.Conn
	wlock sync.Mutex
	pipes map[uint32]*io.PipeWriter
	conns map[uint32]*muxConn
}

type muxConn struct {
	id uint32
	m  *mux
	r  *io.PipeReader
}

func newMux(trunk net.Conn) *mux {
	m := &mux{trunk: trunk, pipes: map[uint32]*io.PipeWriter{}, conns: map[uint32]*muxConn{}}
	for _, id := range []uint32{pluginServiceConn, runtimeServiceConn} {
		r, w := io.Pipe()
		m.pipes[id] = w
		m.conns[id] = &muxConn{id: id, m: m, r: r}
	}
	go m.read()
	return m
}

func (m *mux) read() {
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(m.trunk, hdr[:]); err != nil {
			m.closeAll(err)
			return
		}
		id, n := binary.BigEndian.Uint32(hdr[0:4]), binary.BigEndian.Uint32(hdr[4:8])
		buf := make([]byte, n)
		if _, err := io.ReadFull(m.trunk, buf); err != nil {
			m.closeAll(err)
			return
		}
		if w, ok := m.pipes[id]; ok {
			w.Write(buf)
		}
	}
}

func (m *mux) closeAll(err error) {
	for _, w := range m.pipes {
		w.CloseWithError(err)
	}
}

func (c *muxConn) Read(b []byte) (int, error) { return c.r.Read(b) }
func (c *muxConn) Write(b []byte) (int, error) {
	var hdr [8]byte
	binary.BigEndian.PutUint32(hdr[0:4], c.id)
	binary.BigEndian.PutUint32(hdr[4:8], uint32(len(b)))
	c.m.wlock.Lock()
	defer c.m.wlock.Unlock()
	if _, err := c.m.trunk.Write(append(hdr[:], b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}
func (c *muxConn) Close() error                     { return c.r.Close() }
func (c *muxConn) LocalAddr() net.Addr              { return c.m.trunk.LocalAddr() }
func (c *muxConn) RemoteAddr() net.Addr             { return c.m.trunk.RemoteAddr() }
func (c *muxConn) SetDeadline(time.Time) error      { return nil }
func (c *muxConn) SetReadDeadline(time.Time) error  { return nil }
func (c *muxConn) SetWriteDeadline(time.Time) error { return nil }

// a listener that hands out one connection, then blocks until closed
type oneConnListener struct {
	conn   net.Conn
	once   sync.Once
	closed sync.Once
	done   chan struct{}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	var conn net.Conn
	l.once.Do(func() { conn = l.conn })
	if conn != nil {
		return conn, nil
	}
	<-l.done
	return nil, errors.New("listener closed")
}
func (l *oneConnListener) Close() error   { l.closed.Do(func() { close(l.done) }); return nil }
func (l *oneConnListener) Addr() net.Addr { return l.conn.LocalAddr() }

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "nri-runtime-check: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 3 {
		fail("usage: nri-runtime-check SOCKET NAMESPACE ENV...")
	}
	os.Remove(os.Args[1])
	l, err := net.Listen("unix", os.Args[1])
	if err != nil {
		fail("listen: %v", err)
	}
	trunk, err := l.Accept()
	if err != nil {
		fail("accept: %v", err)
	}
	m := newMux(trunk)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	registered := make(chan *RegisterPluginRequest, 1)
	srv, err := ttrpc.NewServer()
	if err != nil {
		fail("server: %v", err)
	}
	srv.Register("nri.pkg.api.v1alpha1.Runtime", map[string]ttrpc.Method{
		"RegisterPlugin": func(ctx context.Context, unmarshal func(interface{}) error) (interface{}, error) {
			req := &RegisterPluginRequest{}
			if err := unmarshal(req); err != nil {
				return nil, err
			}
			registered <- req
			return &Empty{}, nil
		},
	})
	listener := &oneConnListener{conn: m.conns[runtimeServiceConn], done: make(chan struct{})}
	go srv.Serve(ctx, listener)

	var reg *RegisterPluginRequest
	select {
	case reg = <-registered:
	case <-ctx.Done():
		fail("plugin did not register")
	}
	client := ttrpc.NewClient(m.conns[pluginServiceConn])
	configured := &ConfigureResponse{}
	err = client.Call(ctx, "nri.pkg.api.v1alpha1.Plugin", "Configure",
		&ConfigureRequest{RuntimeName: "ttrpc-check", RuntimeVersion: "1", RegistrationTimeout: 5000, RequestTimeout: 2000},
		configured)
	if err != nil {
		fail("Configure: %v", err)
	}
	if err = client.Call(ctx, "nri.pkg.api.v1alpha1.Plugin", "Synchronize", &SynchronizeRequest{}, &SynchronizeResponse{}); err != nil {
		fail("Synchronize: %v", err)
	}
	created := &CreateContainerResponse{}
	err = client.Call(ctx, "nri.pkg.api.v1alpha1.Plugin", "CreateContainer", &CreateContainerRequest{
		Pod:       &PodSandbox{Id: "sandbox", Name: "pod", Namespace: os.Args[2], Annotations: map[string]string{"a": "b"}},
		Container: &Container{Id: "ctr", Name: "main", Env: os.Args[3:]},
	}, created)
	if err != nil {
		fail("CreateContainer: %v", err)
	}
	unknown := client.Call(ctx, "no.Such.Service", "Thing", &Empty{}, &Empty{})
	out, _ := json.Marshal(map[string]interface{}{
		"plugin_name": reg.PluginName, "plugin_idx": reg.PluginIdx, "events": configured.Events,
		"adjust": created.Adjust, "unknown_service_error": fmt.Sprint(unknown),
	})
	fmt.Println(string(out))
	client.Close()
	srv.Close()
	trunk.Close()
}
