package nvml

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation"
)

// inventory builds a present inventory of n GPUs of one product.
func inventory(n int, product, cc, driver, cuda string) Inventory {
	inv := Inventory{Backend: "test", Present: true, DriverVersion: driver, CUDADriverVersion: cuda, DeviceCount: n}
	for i := range n {
		inv.Devices = append(inv.Devices, Device{Index: i, Product: product, ComputeCapability: cc,
			UUID: fmt.Sprintf("GPU-%d", i), PCIBusID: fmt.Sprintf("00000000:%02x:00.0", i), MemoryMiB: 81559})
	}
	inv.SKU = SKUKey(inv)
	return inv
}

var keyShape = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*-[0-9a-f]{8}$`)

func checkKey(t *testing.T, key string) {
	t.Helper()
	if len(key) > 63 || !keyShape.MatchString(key) {
		t.Errorf("key %q (%d chars) is not [a-z0-9.-]{..63} ending in -<8 hex>", key, len(key))
	}
	if errs := validation.IsValidLabelValue(key); len(errs) > 0 {
		t.Errorf("key %q is not a label value: %v", key, errs)
	}
	if errs := validation.IsDNS1123Subdomain(key); len(errs) > 0 {
		t.Errorf("key %q is not a safe path element: %v", key, errs)
	}
}

func TestSKUKeyShape(t *testing.T) {
	long := "NVIDIA RTX PRO 6000 Blackwell Server Edition (Engineering Sample / Very Long Name)"
	tests := []struct {
		name string
		inv  Inventory
		want string // readable part before the hash; "" to skip
	}{
		{"H100", inventory(8, "NVIDIA H100 80GB HBM3", "9.0", "570.124.06", "12.8"), "nvidia-h100-80gb-hbm3.sm90.cuda12.8.drv570"},
		{"GB300 on CUDA 13", inventory(4, "NVIDIA GB300", "10.3", "580.82.07", "13.0"), "nvidia-gb300.sm103.cuda13.0.drv580"},
		{"RTX PRO 6000 sm120", inventory(1, "NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", "580.82.07", "13.0"), ""},
		{"very long odd name", inventory(1, long, "12.0", "580.82.07", "13.0"), ""},
		{"symbols only", inventory(1, "???", "9.0", "580.82.07", "13.0"), "gpu.sm90.cuda13.0.drv580"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := tt.inv.SKU
			checkKey(t, key)
			if tt.want != "" && key[:len(key)-9] != tt.want {
				t.Errorf("key %q, want readable part %q", key, tt.want)
			}
		})
	}
}

func TestSKUKeyHeterogeneousAndMIG(t *testing.T) {
	a100 := inventory(4, "NVIDIA A100-SXM4-80GB", "8.0", "570.124.06", "12.8")
	h100 := inventory(4, "NVIDIA H100 80GB HBM3", "9.0", "570.124.06", "12.8")
	mixed := a100
	mixed.DeviceCount = 8
	mixed.Devices = append(append([]Device{}, a100.Devices...), h100.Devices...)
	mixedReversed := mixed
	mixedReversed.Devices = append(append([]Device{}, h100.Devices...), a100.Devices...)
	mig := func(inv Inventory, profiles ...string) Inventory {
		inv.Devices = append([]Device{}, inv.Devices...)
		m := &MIG{Enabled: true}
		for i, p := range profiles {
			m.Devices = append(m.Devices, MIGDevice{Index: i, Profile: p, UUID: fmt.Sprintf("MIG-%d", i)})
		}
		inv.Devices[0].MIG = m
		return inv
	}
	keys := map[string]string{
		"a100":          SKUKey(a100),
		"h100":          SKUKey(h100),
		"mixed":         SKUKey(mixed),
		"h100 mig 1g":   SKUKey(mig(h100, "1g.10gb")),
		"h100 mig 3g":   SKUKey(mig(h100, "3g.40gb")),
		"h100 mig none": SKUKey(mig(h100)),
	}
	seen := map[string]string{}
	for name, k := range keys {
		checkKey(t, k)
		if other, dup := seen[k]; dup {
			t.Errorf("%s and %s share key %q", name, other, k)
		}
		seen[k] = name
	}
	if SKUKey(mixedReversed) != keys["mixed"] {
		t.Errorf("device order changed the key: %q vs %q", SKUKey(mixedReversed), keys["mixed"])
	}
	if SKUKey(mig(h100, "1g.10gb", "1g.10gb", "1g.10gb")) != keys["h100 mig 1g"] {
		t.Error("MIG key should reflect the set of profiles, not how many slices")
	}
	if !strings.Contains(keys["h100 mig 1g"], ".mig") {
		t.Errorf("MIG key %q does not say mig", keys["h100 mig 1g"])
	}
	t.Logf("examples: %v", keys)
}

func TestSKUCanonicalExcludesInstanceIdentity(t *testing.T) {
	inv := inventory(2, "NVIDIA H100 80GB HBM3", "9.0", "570.124.06", "12.8")
	inv.Devices[0].MIG = &MIG{Enabled: true, Devices: []MIGDevice{{UUID: "MIG-abc", Profile: "1g.10gb", GPUInstanceID: 7}}}
	inv.Devices[1].Fabric = &Fabric{State: "completed", ClusterUUID: "9277d399-0674-44a9-b64e-d85bb19ce2b0", CliqueID: 32766}
	canon, err := SKUCanonical(inv)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range inv.Devices {
		for _, id := range []string{d.UUID, d.PCIBusID, "MIG-abc", "9277d399", "32766", "81559"} {
			if strings.Contains(canon, id) {
				t.Errorf("canonical text contains %q:\n%s", id, canon)
			}
		}
	}
	want := "warmd-sku/v1\ndriver-major=570\ncuda=12.8\n" +
		"gpu=NVIDIA H100 80GB HBM3;cc=9.0;mig=[1g.10gb]\ngpu=NVIDIA H100 80GB HBM3;cc=9.0;mig=off"
	if canon != want {
		t.Errorf("canonical:\n%s\nwant:\n%s", canon, want)
	}
}

func TestSKUKeyIncomplete(t *testing.T) {
	base := func() Inventory { return inventory(2, "NVIDIA H100 80GB HBM3", "9.0", "570.124.06", "12.8") }
	tests := []struct {
		name   string
		mutate func(*Inventory)
		want   string
	}{
		{"complete", func(*Inventory) {}, ""},
		{"not present", func(i *Inventory) { i.Present = false }, SKUNone},
		{"no driver version", func(i *Inventory) { i.DriverVersion = "" }, SKUUnknown},
		{"odd driver version", func(i *Inventory) { i.DriverVersion = "abc" }, SKUUnknown},
		{"no CUDA version", func(i *Inventory) { i.CUDADriverVersion = "" }, SKUUnknown},
		{"a device missing", func(i *Inventory) { i.Devices = i.Devices[:1] }, SKUUnknown},
		{"no product name", func(i *Inventory) { i.Devices[1].Product = "" }, SKUUnknown},
		{"no compute capability", func(i *Inventory) { i.Devices[0].ComputeCapability = "" }, SKUUnknown},
		{"MIG unreadable", func(i *Inventory) { i.Devices[0].MIG = &MIG{Incomplete: true} }, SKUUnknown},
		{"MIG profile missing", func(i *Inventory) {
			i.Devices[0].MIG = &MIG{Enabled: true, Devices: []MIGDevice{{UUID: "MIG-1"}}}
		}, SKUUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inv := base()
			tt.mutate(&inv)
			got := SKUKey(inv)
			if tt.want == "" {
				checkKey(t, got)
				if !Cacheable(got) {
					t.Errorf("complete inventory key %q not cacheable", got)
				}
				return
			}
			if got != tt.want || Cacheable(got) {
				t.Errorf("key %q (cacheable %v), want %q and not cacheable", got, Cacheable(got), tt.want)
			}
		})
	}
}

func TestFormatCUDAVersion(t *testing.T) {
	for in, want := range map[int]string{12040: "12.4", 12080: "12.8", 13000: "13.0", 12090: "12.9", 11080: "11.8"} {
		if got := FormatCUDAVersion(in); got != want {
			t.Errorf("FormatCUDAVersion(%d) = %q, want %q", in, got, want)
		}
	}
}
