// dra-test-driver: a minimal DRA kubelet plugin for the one-node
// Kubernetes of the tests, written against the kubeletplugin helper of
// k8s.io/dynamic-resource-allocation (the release line named in
// ../../go.mod). It registers with the kubelet under -driver, publishes
// one ResourceSlice (pool = the node's name) with one device per PCI
// address of -pci, each carrying the standard
// resource.kubernetes.io/pciBusID attribute (and pcieRoot and numaNode
// where the machine's sysfs has them), and at NodePrepareResources writes
// one CDI spec per claim into -cdi-dir whose devices each inject a
// character device node (/dev/null's numbers, at
// /dev/topomgr-dra-<device>) and TOPOMGR_DRA_PCI_<DEVICE>=<its PCI
// address> into the container, answering those CDI names to the kubelet
// (the devices of -no-cdi get none: the kubelet then names them by
// driver, pool and device only); NodeUnprepareResources removes the
// claim's spec.
//
// Usage:
//
//	dra-test-driver -kubeconfig PATH -node NAME -kubelet-dir DIR -cdi-dir DIR -pci ADDR[,ADDR...] [-no-cdi dev-N,...]
//
// Runs until SIGTERM or SIGINT; a bad flag or a failed start exits 1 with
// the reason on stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
)

// The CDI spec version written: one that containerd 1.7's CDI library
// reads.
const cdiVersion = "0.5.0"

type driver struct {
	name   string
	pool   string
	cdiDir string
	// Device name -> PCI address, as published.
	devices map[string]string
	// Devices prepared without a CDI device (the kubelet then names them
	// by driver, pool and device only).
	noCDI map[string]bool
}

// cdiKind is the CDI kind of the driver's devices: <driver>/dev.
func (d *driver) cdiKind() string { return d.name + "/dev" }

func (d *driver) specPath(claim types.UID) string {
	return filepath.Join(d.cdiDir, fmt.Sprintf("%s-%s.json", d.name, claim))
}

type cdiDeviceNode struct {
	Path        string `json:"path"`
	HostPath    string `json:"hostPath"`
	Type        string `json:"type"`
	Major       int64  `json:"major"`
	Minor       int64  `json:"minor"`
	Permissions string `json:"permissions"`
}

type cdiEdits struct {
	Env         []string        `json:"env,omitempty"`
	DeviceNodes []cdiDeviceNode `json:"deviceNodes,omitempty"`
}

type cdiDevice struct {
	Name           string   `json:"name"`
	ContainerEdits cdiEdits `json:"containerEdits"`
}

type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

// PrepareResourceClaims writes one CDI spec per claim with one CDI device
// per allocated device of this driver, named <claim uid>-<device> so that
// a name is never reused for another claim.
func (d *driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		out[claim.UID] = d.prepare(claim)
	}
	return out, nil
}

func (d *driver) prepare(claim *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if claim.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)}
	}
	spec := cdiSpec{Version: cdiVersion, Kind: d.cdiKind()}
	var devices []kubeletplugin.Device
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.name {
			continue
		}
		pci, ok := d.devices[r.Device]
		if r.Pool != d.pool || !ok {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s/%s is not one this driver published (pool %s, devices %v)",
				claim.Namespace, claim.Name, r.Pool, r.Device, d.pool, d.devices)}
		}
		if d.noCDI[r.Device] {
			devices = append(devices, kubeletplugin.Device{
				Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device,
			})
			continue
		}
		name := fmt.Sprintf("%s-%s", claim.UID, r.Device)
		spec.Devices = append(spec.Devices, cdiDevice{
			Name: name,
			ContainerEdits: cdiEdits{
				Env: []string{"TOPOMGR_DRA_PCI_" + strings.ToUpper(strings.ReplaceAll(r.Device, "-", "_")) + "=" + pci},
				DeviceNodes: []cdiDeviceNode{{
					Path: "/dev/topomgr-dra-" + r.Device, HostPath: "/dev/null",
					Type: "c", Major: 1, Minor: 3, Permissions: "rw",
				}},
			},
		})
		devices = append(devices, kubeletplugin.Device{
			Requests:     []string{r.Request},
			PoolName:     r.Pool,
			DeviceName:   r.Device,
			CDIDeviceIDs: []string{d.cdiKind() + "=" + name},
		})
	}
	if len(spec.Devices) == 0 {
		// A spec without devices is invalid: none is written.
		return kubeletplugin.PrepareResult{Devices: devices}
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("cannot encode the CDI spec: %w", err)}
	}
	// Written whole under another name and renamed: the runtime never
	// reads half a spec.
	path := d.specPath(claim.UID)
	if err := os.WriteFile(path+".tmp", data, 0o644); err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("cannot write the CDI spec: %w", err)}
	}
	if err := os.Rename(path+".tmp", path); err != nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("cannot write the CDI spec: %w", err)}
	}
	return kubeletplugin.PrepareResult{Devices: devices}
}

// UnprepareResourceClaims removes the claims' specs; one already gone is
// not an error (the kubelet may ask twice).
func (d *driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		err := os.Remove(d.specPath(c.UID))
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		out[c.UID] = err
	}
	return out, nil
}

func (d *driver) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

func (d *driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

// deviceOf is the published device for PCI address pci: its bus id, and
// its PCIe root and NUMA node where sysfs has them.
func deviceOf(name, pci string) (resourceapi.Device, error) {
	dev := resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}}
	bus, err := deviceattribute.GetPCIBusIDAttribute(pci)
	if err != nil {
		return dev, fmt.Errorf("-pci %s: %w", pci, err)
	}
	dev.Attributes[bus.Name] = bus.Value
	if root, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(pci); err == nil {
		dev.Attributes[root.Name] = root.Value
	}
	if numa, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(pci, deviceattribute.ScalarAttribute); err == nil {
		dev.Attributes[numa.Name] = numa.Value
	}
	return dev, nil
}

func run() error {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of a user that may write ResourceSlices")
	node := flag.String("node", "", "the Node's name (also the pool's)")
	name := flag.String("driver", "dra.topomgr.test", "the DRA driver name")
	kubeletDir := flag.String("kubelet-dir", "/var/lib/kubelet", "the kubelet's root directory (plugins_registry and plugins/ under it)")
	cdiDir := flag.String("cdi-dir", "/var/run/cdi", "where the runtime reads CDI specs")
	pcis := flag.String("pci", "", "PCI addresses of this machine, one device each (dev-0, dev-1, ...)")
	noCDI := flag.String("no-cdi", "", "devices (dev-N, comma-separated) prepared without a CDI device")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *node == "" || *pcis == "" || flag.NArg() != 0 {
		return errors.New("usage: dra-test-driver -kubeconfig PATH -node NAME -kubelet-dir DIR -cdi-dir DIR -pci ADDR[,ADDR...]")
	}
	d := &driver{name: *name, pool: *node, cdiDir: *cdiDir, devices: map[string]string{}, noCDI: map[string]bool{}}
	var published []resourceapi.Device
	for i, pci := range strings.Split(*pcis, ",") {
		devName := fmt.Sprintf("dev-%d", i)
		dev, err := deviceOf(devName, pci)
		if err != nil {
			return err
		}
		d.devices[devName] = pci
		published = append(published, dev)
	}
	for _, n := range strings.Split(*noCDI, ",") {
		if n == "" {
			continue
		}
		if _, ok := d.devices[n]; !ok {
			return fmt.Errorf("-no-cdi %s: no such device (there are %d, dev-0 to dev-%d)", n, len(d.devices), len(d.devices)-1)
		}
		d.noCDI[n] = true
	}
	pluginDir := filepath.Join(*kubeletDir, "plugins", *name)
	for _, dir := range []string{*cdiDir, pluginDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cannot create %s: %w", dir, err)
		}
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("-kubeconfig %s: %w", *kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("-kubeconfig %s: %w", *kubeconfig, err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(*name),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(*node),
		kubeletplugin.RegistrarDirectoryPath(filepath.Join(*kubeletDir, "plugins_registry")),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
	)
	if err != nil {
		return fmt.Errorf("cannot start the kubelet plugin: %w", err)
	}
	defer helper.Stop()
	err = helper.PublishResources(ctx, resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{*node: {Slices: []resourceslice.Slice{{Devices: published}}}},
	})
	if err != nil {
		return fmt.Errorf("cannot publish the ResourceSlice: %w", err)
	}
	klog.InfoS("serving", "driver", *name, "node", *node, "devices", d.devices)
	// The kubelet's answer to the registration, once: what a test waits
	// for before it creates a pod that needs the driver.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if s := helper.RegistrationStatus(); s != nil {
			if s.PluginRegistered {
				klog.InfoS("registered with the kubelet", "driver", *name)
			} else {
				klog.InfoS("the kubelet refused the registration", "driver", *name, "error", s.Error)
			}
			break
		}
	}
	<-ctx.Done()
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "dra-test-driver: %v\n", err)
		os.Exit(1)
	}
}
