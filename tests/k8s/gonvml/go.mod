module mokka.test/k8s/gonvml

go 1.24.0

require github.com/NVIDIA/go-nvml v0.13.4-1
