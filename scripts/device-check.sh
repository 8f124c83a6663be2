#!/usr/bin/env bash
# device-check.sh: on a machine with an NVIDIA GPU, build warmd with cgo, run `warmd gpu -o json` and
# print it next to nvidia-smi's view of the same GPUs, so the NVML backend is checked against the
# driver's own tool. Finishes in well under 5 minutes (a cached build takes seconds; a cold cgo build
# of go-nvml about a minute on 2 cores).
#
#   scripts/device-check.sh                 # build ./bin/warmd-gpu with CGO_ENABLED=1, then check
#   WARMD_BIN=bin/warmd scripts/device-check.sh   # use a prebuilt binary (e.g. carried to a machine
#                                                # without Go or without the module cache)
#
# Output files go to $OUT when set (the device runner copies them back), else to a temp dir.
# Exit status: 0 when warmd found the GPUs nvidia-smi lists with the same names and compute
# capabilities; 1 otherwise; 2 when no binary could be built.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$(mktemp -d /tmp/warmd-device-check.XXXXXX)}"
mkdir -p "$out"

bin="${WARMD_BIN:-}"
if [[ -z "$bin" ]]; then
	if ! command -v go >/dev/null; then
		echo "device-check: no Go toolchain here; build on a machine with one and pass WARMD_BIN=path" >&2
		exit 2
	fi
	bin=bin/warmd-gpu
	echo "== build (CGO_ENABLED=1)"
	# go-nvml's generated cgo code uses NVML calls the CUDA 13 header marks deprecated; the warnings
	# are noise, not problems.
	if ! CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:-} -Wno-deprecated-declarations" GOFLAGS="${GOFLAGS:--buildvcs=false}" \
		timeout 240 go build -o "$bin" ./cmd/warmd 2>"$out/build.log"; then
		cat "$out/build.log" >&2
		echo "device-check: build failed (offline without a module cache? pass WARMD_BIN)" >&2
		exit 2
	fi
fi

echo "== uname / driver"
uname -srm
cat /proc/driver/nvidia/version 2>/dev/null | head -1 || echo "(no /proc/driver/nvidia/version)"

echo "== warmd gpu -o json"
timeout 60 "$bin" gpu -o json >"$out/warmd-gpu.json" 2>"$out/warmd-gpu.stderr"
rc=$?
cat "$out/warmd-gpu.json"
[[ -s "$out/warmd-gpu.stderr" ]] && { echo "-- stderr"; cat "$out/warmd-gpu.stderr"; }
echo "warmd gpu exit status: $rc"

echo "== warmd gpu (table, with GFD names)"
timeout 60 "$bin" gpu --gfd-labels | tee "$out/warmd-gpu.table"

echo "== nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv"
if command -v nvidia-smi >/dev/null; then
	timeout 60 nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv | tee "$out/nvidia-smi.csv"
	timeout 60 nvidia-smi -L | tee -a "$out/nvidia-smi.csv"
else
	echo "(nvidia-smi not found)" | tee "$out/nvidia-smi.csv"
fi

echo "== compare"
if ! command -v python3 >/dev/null; then
	echo "(python3 not found: compare the two listings above by eye)"
	exit "$rc"
fi
python3 - "$out/warmd-gpu.json" "$out/nvidia-smi.csv" <<'PY'
import csv, json, sys
inv = json.load(open(sys.argv[1]))["inventory"]
ours = [(d.get("product", ""), d.get("computeCapability", ""), inv.get("driverVersion", "")) for d in inv["devices"]]
rows = [r for r in csv.reader(open(sys.argv[2])) if len(r) == 3 and r[0] != "name"]
smi = [tuple(c.strip() for c in r) for r in rows]
print("warmd  :", ours)
print("smi    :", smi)
print("sku    :", inv["sku"], "| cuda", inv.get("cudaDriverVersion"), "| clique", inv.get("clique", "-"))
ok = inv["present"] and ours == smi and inv["sku"] not in ("none", "unknown")
print("MATCH" if ok else "MISMATCH")
sys.exit(0 if ok else 1)
PY
cmp=$?
exit $(( rc != 0 || cmp != 0 ))
