package nvml

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRecordedReplaysWarmdGPUOutput(t *testing.T) {
	inv, err := Recorded{Path: "testdata/recorded-h100x8.json"}.Detect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if inv.Backend != "recorded" || inv.DeviceCount != 8 || !inv.Present {
		t.Errorf("inventory = backend %q, %d devices, present %v", inv.Backend, inv.DeviceCount, inv.Present)
	}
	if inv.SKU != "nvidia-h100-80gb-hbm3.sm90.cuda12.4.drv550-32aaa566" || !Cacheable(inv.SKU) {
		t.Errorf("SKU = %q, want the key the real H100 node produced", inv.SKU)
	}
}

func TestRecordedRecomputesTheKey(t *testing.T) {
	b, err := os.ReadFile("testdata/recorded-h100x8.json")
	if err != nil {
		t.Fatal(err)
	}
	forged := strings.Replace(string(b), `"sku": "nvidia-h100-80gb-hbm3.sm90.cuda12.4.drv550-32aaa566"`, `"sku": "nvidia-b200.sm100"`, 1)
	p := filepath.Join(t.TempDir(), "inv.json")
	os.WriteFile(p, []byte(forged), 0o644)
	inv, err := Recorded{Path: p}.Detect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(inv.SKU, "nvidia-h100-80gb-hbm3.sm90") {
		t.Errorf("SKU = %q: a recording's claimed key was trusted over its hardware", inv.SKU)
	}
}

func TestRecordedErrorsNameTheFix(t *testing.T) {
	_, err := Recorded{Path: "/nonexistent/inv.json"}.Detect(context.Background())
	if err == nil || !strings.Contains(err.Error(), EnvRecordedInventory) {
		t.Errorf("error %v does not name %s", err, EnvRecordedInventory)
	}
	p := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(p, []byte("not json"), 0o644)
	if _, err := (Recorded{Path: p}).Detect(context.Background()); err == nil || !strings.Contains(err.Error(), "warmd gpu -o json") {
		t.Errorf("error %v does not say how to record one", err)
	}
}
