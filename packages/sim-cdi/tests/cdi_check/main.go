// cdi-check: validate a CDI spec and inject its devices into an OCI runtime spec with the
// same Go package container runtimes use (Debian's container-device-interface).
//
//	cdi-check validate SPEC.yaml             prints "ok <kind> <device>..." or the error (exit 1)
//	cdi-check inject SPECDIR CONFIG.json DEV  edits CONFIG.json in place as a runtime would
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/container-orchestrated-devices/container-device-interface/pkg/cdi"
	"github.com/container-orchestrated-devices/container-device-interface/pkg/cdi/validate"
	oci "github.com/opencontainers/runtime-spec/specs-go"
)

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) < 3 {
		fail("usage: cdi-check validate SPEC | inject SPECDIR CONFIG.json DEVICE...")
	}
	cdi.SetSpecValidator(validate.WithDefaultSchema())
	switch os.Args[1] {
	case "validate":
		spec, err := cdi.ReadSpec(os.Args[2], 0)
		if err != nil {
			fail("invalid: %v", err)
		}
		var names []string
		for _, d := range spec.Devices {
			names = append(names, d.Name)
		}
		sort.Strings(names)
		fmt.Printf("ok %s %s %s\n", spec.Version, spec.Kind, strings.Join(names, " "))
	case "inject":
		if len(os.Args) < 5 {
			fail("usage: cdi-check inject SPECDIR CONFIG.json DEVICE...")
		}
		cache, err := cdi.NewCache(cdi.WithSpecDirs(os.Args[2]), cdi.WithAutoRefresh(false))
		if err != nil {
			fail("cache: %v", err)
		}
		for path, errs := range cache.GetErrors() {
			for _, e := range errs {
				fmt.Fprintf(os.Stderr, "spec error %s: %v\n", path, e)
			}
		}
		data, err := os.ReadFile(os.Args[3])
		if err != nil {
			fail("read %s: %v", os.Args[3], err)
		}
		var spec oci.Spec
		if err := json.Unmarshal(data, &spec); err != nil {
			fail("parse %s: %v", os.Args[3], err)
		}
		if _, err := cache.InjectDevices(&spec, os.Args[4:]...); err != nil {
			fail("inject: %v", err)
		}
		out, _ := json.MarshalIndent(&spec, "", "  ")
		if err := os.WriteFile(os.Args[3], out, 0o644); err != nil {
			fail("write %s: %v", os.Args[3], err)
		}
		fmt.Println("injected", strings.Join(os.Args[4:], " "))
	default:
		fail("unknown command %q", os.Args[1])
	}
}
