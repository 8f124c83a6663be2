package nvml

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
)

// EnvRecordedInventory names a file holding an inventory recorded with `warmd gpu -o json` on a real
// node. When it is set, `warmd run` and `warmd gpu` read the GPUs from that file instead of NVML. It
// exists for what has no GPU but must behave like a GPU node of a known SKU: the two-node end-to-end
// test, demos, and reproducing a customer's node from their recording. Like the null fallback it
// replaces only where the inventory comes from; everything after it (SKU key, labels, caches) is the
// production path.
const EnvRecordedInventory = "WARMD_GPU_INVENTORY_FILE"

// Recorded is a Detector that replays a recorded inventory.
type Recorded struct{ Path string }

var _ Detector = Recorded{}

// Detect reads the recording. The SKU key is computed again from the recorded fields, so a recording
// cannot claim a key its hardware would not produce.
func (r Recorded) Detect(context.Context) (Inventory, error) {
	b, err := os.ReadFile(r.Path)
	if err != nil {
		return Inventory{Backend: "recorded", Reason: "recorded inventory unreadable"},
			fmt.Errorf("read recorded GPU inventory (%s): %w (unset it to use NVML)", EnvRecordedInventory, err)
	}
	// Accept both `warmd gpu -o json` output ({"inventory": …}) and a bare inventory.
	var report struct {
		Inventory *Inventory `json:"inventory"`
	}
	var inv Inventory
	if err := json.Unmarshal(b, &report); err == nil && report.Inventory != nil {
		inv = *report.Inventory
	} else if err := json.Unmarshal(b, &inv); err != nil {
		return Inventory{Backend: "recorded", Reason: "recorded inventory is not JSON"},
			fmt.Errorf("decode recorded GPU inventory %s: %w (record one with `warmd gpu -o json`)", r.Path, err)
	}
	inv.Backend = "recorded"
	inv.SKU = SKUKey(inv)
	return inv, nil
}

// DetectorFromEnv returns the Recorded detector when EnvRecordedInventory is set, else real.
func DetectorFromEnv(real Detector) Detector {
	if p := os.Getenv(EnvRecordedInventory); p != "" {
		return Recorded{Path: p}
	}
	return real
}
