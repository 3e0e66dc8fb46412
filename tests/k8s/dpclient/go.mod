// Our kubelet-side client of the device-plugin v1beta1 API (main.go), at the versions of k8s.io/kubelet
// and grpc that the pinned k8s-device-plugin release (../deviceplugin/go.mod) builds with.
module mokka.test/k8s/dpclient

go 1.25.0

require (
	google.golang.org/grpc v1.81.0
	k8s.io/kubelet v0.35.5
)

require (
	golang.org/x/net v0.56.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
	golang.org/x/text v0.38.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260226221140-a57be14db171 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)
