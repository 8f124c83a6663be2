#!/usr/bin/env bash
# device-check.sh: the checks that need an NVIDIA GPU, as one prepared run (well under 5 minutes) on a
# machine with a GPU and PyTorch (vLLM not needed):
#
#   1. build warmd with cgo (go-nvml) unless --bin is given;
#   2. `warmd gpu -o json` from the real driver, compared with nvidia-smi's names and capabilities;
#   3. a real torch.compile (Inductor, Triton kernels) of a small transformer block, with the cache
#      dirs set to what `warmd cache env` prints (its /warmd/compile-cache mount mapped onto the SKU
#      tree under a scratch data dir, as the hostPath volume maps it for a pod);
#   4. `warmd cache export` captures the trees, they are wiped, `warmd cache import` restores them;
#   5. the same compile again, in a new process: cold vs restored compile seconds, the files captured
#      and restored, and whether the second run hit Inductor's FX graph cache.
#
# Usage: scripts/device-check.sh [--out DIR] [--bin WARMD] [--python PY] [--skip-compile] [--cache-only SKU]
#        scripts/device-check.sh --prepare DIR
#   --out DIR          where outputs go (default $OUT, which the device runner copies back; else a temp dir)
#   --bin WARMD        use a prebuilt warmd (also WARMD_BIN), e.g. carried to a machine without Go or
#                      without network for the module cache; a .gz file is unpacked first
#   --prepare DIR      build the stripped cgo binary here and write DIR/warmd-gpu.gz to carry to the
#                      GPU machine (the full binary is over 100 MB)
#   --python PY        a Python with torch and CUDA (also PYTHON; default python3)
#   --skip-compile     steps 1-2 only
#   --cache-only SKU   no GPU, no torch: run step 4 on synthetic files in SKU's tree (checks the
#                      capture/wipe/restore round trip and this script's use of the CLI anywhere)
#
# Exit status: 0 every check passed; 1 a check failed (GPU listing mismatch, restored run missed);
# 2 usage or setup error (no Go to build, no torch with CUDA, build failed); 3 no NVIDIA GPU here, so
# nothing was checked. $OUT/result.txt holds one word: ok, failed, error or no-gpu.
set -uo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$self")/.."

usage() { sed -n '/^# Usage:/,/^set -uo/{/^#/s/^# \{0,1\}//p;}' "$self"; }

out="${OUT:-}" bin="${WARMD_BIN:-}" py="${PYTHON:-python3}" skip_compile=0 cache_only="" prepare=""
while (($#)); do
	case "$1" in
	-h | --help) usage; exit 0 ;;
	--out | --bin | --python | --cache-only | --prepare)
		if (($# < 2)) || [[ -z "$2" || "$2" == -* ]]; then
			echo "device-check: $1 needs a value" >&2; usage >&2; exit 2
		fi
		case "$1" in
		--out) out="$2" ;; --bin) bin="$2" ;; --python) py="$2" ;; --cache-only) cache_only="$2" ;; --prepare) prepare="$2" ;;
		esac
		shift 2 ;;
	--skip-compile) skip_compile=1; shift ;;
	*) echo "device-check: unknown option $1" >&2; usage >&2; exit 2 ;;
	esac
done
if [[ -z "$out" ]]; then
	out="$(mktemp -d "${TMPDIR:-/tmp}/warmd-device-check.XXXXXX")"
fi
mkdir -p "$out" || { echo "device-check: cannot create $out" >&2; exit 2; }
finish() { echo "$1" >"$out/result.txt"; echo "device-check: $1 (outputs in $out)"; exit "$2"; }

# The probed paths can be moved (tests run the no-GPU path on machines that have one).
root="${WARMD_DEVICE_CHECK_ROOT:-}"
smi="${WARMD_DEVICE_CHECK_NVIDIA_SMI:-nvidia-smi}"
have_gpu() {
	[[ -e "$root/proc/driver/nvidia/version" ]] && return 0
	compgen -G "$root/dev/nvidia[0-9]*" >/dev/null && return 0
	command -v "$smi" >/dev/null 2>&1 && "$smi" -L 2>/dev/null | grep -q '^GPU '
}

build() {
	if [[ "$bin" == *.gz ]]; then
		local unpacked
		unpacked="$(mktemp -d "${TMPDIR:-/tmp}/warmd-bin.XXXXXX")/warmd"
		gzip -dc "$bin" >"$unpacked" && chmod +x "$unpacked" || { echo "device-check: cannot unpack $bin" >&2; finish error 2; }
		bin="$unpacked"
	fi
	[[ -n "$bin" ]] && return 0
	if ! command -v go >/dev/null; then
		echo "device-check: no Go toolchain here; build on a machine with one and pass --bin PATH" >&2
		finish error 2
	fi
	bin=bin/warmd-gpu
	echo "== build (CGO_ENABLED=$1)"
	# go-nvml's generated cgo code uses NVML calls the CUDA 13 header marks deprecated: noise, not problems.
	if ! CGO_ENABLED="$1" CGO_CFLAGS="${CGO_CFLAGS:-} -Wno-deprecated-declarations" GOFLAGS="${GOFLAGS:--buildvcs=false}" \
		timeout 600 go build -ldflags="-s -w" -o "$bin" ./cmd/warmd 2>"$out/build.log"; then
		cat "$out/build.log" >&2
		echo "device-check: build failed (offline without a module cache? pass --bin)" >&2
		finish error 2
	fi
}

# pod_env DATA TREE: `warmd cache env` with its pod mount mapped onto TREE, as NAME=VALUE lines.
pod_env() {
	"$bin" cache env -o json --data-dir "$1" >"$out/cache-env.json" || return 1
	python3 - "$out/cache-env.json" "$2" <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))
mount = st["volumeMounts"][0]["mountPath"]
for e in st["env"]:
    v = e["value"]
    if v == mount or v.startswith(mount + "/"):
        v = sys.argv[2] + v[len(mount):]
    print("%s=%s" % (e["name"], v))
PY
}

count_files() { find "$1" -type f 2>/dev/null | wc -l | tr -d ' '; }

# new_tree DATA SKU: the empty SKU tree the daemon creates on a node it runs on (component dirs and
# the tree's record dir, pkg/cache Layout.ensure): no CLI command creates one, and export and import
# open an existing tree.
new_tree() {
	mkdir -p "$1/compile-cache/.bundles/$2" &&
		for c in vllm inductor triton flashinfer; do mkdir -p "$1/compile-cache/$2/$c" || return 1; done
}

# list_tree TREE: "sha256  path" of the files warmd captures (pkg/cache skips lock, temp and log
# files and tmp/, locks/, __pycache__/ dirs: a compiler rewrites those and they are never restored).
list_tree() {
	python3 - "$1" <<'PY'
import hashlib, os, sys
root = sys.argv[1]
def ignored(rel):
    els = rel.split("/")
    for el in els:
        if el in ("tmp", "locks", "__pycache__", ".warmd") or el.startswith(("tmp.", "tmp_", ".nfs")):
            return True
    base = els[-1]
    return base.endswith((".lock", ".tmp", ".log", ".swp", ".part", "~")) or ".tmp." in base
for d, _, files in os.walk(root):
    for f in files:
        p = os.path.join(d, f)
        rel = os.path.relpath(p, root)
        if os.path.isfile(p) and not os.path.islink(p) and not ignored(rel):
            print(hashlib.sha256(open(p, "rb").read()).hexdigest() + "  " + rel)
PY
}

# round_trip DATA SKU: capture with `warmd cache export`, wipe the tree, restore with `warmd cache import`.
round_trip() {
	local data="$1" sku="$2" tree="$1/compile-cache/$2" exp="$out/export"
	list_tree "$tree" | sort -k2 >"$out/tree-before.sha256"
	before=$(wc -l <"$out/tree-before.sha256" | tr -d ' ')
	skipped=$(( $(count_files "$tree") - before ))
	rm -rf "$exp"
	echo "== warmd cache export (capture $before files)"
	if ! timeout 120 "$bin" cache export --data-dir "$data" --sku "$sku" --out "$exp" >"$out/export.txt" 2>"$out/export.err"; then
		cat "$out/export.err" >&2
		return 1
	fi
	bundles=$(wc -l <"$out/export.txt" | tr -d ' ')
	bundle_bytes=$(cat $(cat "$out/export.txt") 2>/dev/null | wc -c | tr -d ' ')
	echo "captured $before files into $bundles bundles ($bundle_bytes bytes; $skipped lock/temp files left out)"
	echo "== wipe $tree"
	find "$tree" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
	wiped=$(count_files "$tree")
	echo "== warmd cache import"
	# shellcheck disable=SC2046 # one argument per bundle file
	if ! timeout 120 "$bin" cache import --data-dir "$data" --sku "$sku" $(cat "$out/export.txt") >"$out/import.txt" 2>"$out/import.err"; then
		cat "$out/import.err" >&2
		return 1
	fi
	list_tree "$tree" | sort -k2 >"$out/tree-after.sha256"
	after=$(wc -l <"$out/tree-after.sha256" | tr -d ' ')
	echo "restored $after files (tree had $wiped after the wipe)"
	if ! cmp -s "$out/tree-before.sha256" "$out/tree-after.sha256"; then
		echo "device-check: the restored tree differs from the captured one:" >&2
		diff "$out/tree-before.sha256" "$out/tree-after.sha256" | head -20 >&2
		return 1
	fi
	[[ "$after" -eq "$before" && "$wiped" -eq 0 ]]
}

if [[ -n "$prepare" ]]; then
	mkdir -p "$prepare" || finish error 2
	build 1
	gzip -9c "$bin" >"$prepare/warmd-gpu.gz" || finish error 2
	echo "wrote $prepare/warmd-gpu.gz ($(wc -c <"$prepare/warmd-gpu.gz" | tr -d ' ') bytes): carry it and pass --bin $prepare/warmd-gpu.gz"
	finish ok 0
fi

if [[ -n "$cache_only" ]]; then
	build 0
	data="$out/data" tree="$out/data/compile-cache/$cache_only"
	new_tree "$data" "$cache_only" || finish error 2
	pod_env "$data" "$tree" >"$out/env.txt" || finish error 2
	while IFS='=' read -r name dir; do
		mkdir -p "$dir/sub" "$dir/locks" && printf '%s\n' "$name" >"$dir/sub/file-$name.bin" &&
			head -c 4096 /dev/urandom >"$dir/blob.bin" && : >"$dir/locks/$name.lock" # the lock is not captured
	done <"$out/env.txt"
	if round_trip "$data" "$cache_only"; then
		echo "cache round trip: $before files captured, $after restored, contents identical"
		finish ok 0
	fi
	finish failed 1
fi

if ! have_gpu; then
	echo "device-check: no NVIDIA GPU here (no ${root}/proc/driver/nvidia/version, no ${root}/dev/nvidia*, no GPU from $smi -L): nothing to check; run it on a GPU machine"
	finish no-gpu 3
fi

build 1
echo "== uname / driver"
uname -srm
head -1 "$root/proc/driver/nvidia/version" 2>/dev/null || echo "(no /proc/driver/nvidia/version)"

echo "== warmd gpu -o json"
timeout 60 "$bin" gpu -o json >"$out/warmd-gpu.json" 2>"$out/warmd-gpu.stderr"
rc=$?
cat "$out/warmd-gpu.json"
[[ -s "$out/warmd-gpu.stderr" ]] && { echo "-- stderr"; cat "$out/warmd-gpu.stderr"; }
echo "warmd gpu exit status: $rc"
[[ $rc -eq 0 ]] || finish failed 1

echo "== nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv"
if command -v "$smi" >/dev/null; then
	timeout 60 "$smi" --query-gpu=name,compute_cap,driver_version --format=csv | tee "$out/nvidia-smi.csv"
else
	echo "(nvidia-smi not found)" | tee "$out/nvidia-smi.csv"
fi
echo "== compare"
python3 - "$out/warmd-gpu.json" "$out/nvidia-smi.csv" <<'PY' || finish failed 1
import csv, json, sys
inv = json.load(open(sys.argv[1]))["inventory"]
ours = [(d.get("product", ""), d.get("computeCapability", ""), inv.get("driverVersion", "")) for d in inv["devices"]]
smi = [tuple(c.strip() for c in r) for r in csv.reader(open(sys.argv[2])) if len(r) == 3 and r[0] != "name"]
print("warmd  :", ours)
print("smi    :", smi)
print("sku    :", inv["sku"], "| cuda", inv.get("cudaDriverVersion"), "| clique", inv.get("clique", "-"))
ok = inv["present"] and (not smi or ours == smi) and inv["sku"] not in ("none", "unknown")
print("MATCH" if ok else "MISMATCH")
sys.exit(0 if ok else 1)
PY
sku=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["inventory"]["sku"])' "$out/warmd-gpu.json")
((skip_compile)) && finish ok 0

echo "== torch"
if ! timeout 60 "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>"$out/torch.err"; then
	cat "$out/torch.err" >&2
	echo "device-check: $py has no PyTorch with CUDA: pass --python PY (or PYTHON=...)" >&2
	finish error 2
fi

data="$out/data" tree="$out/data/compile-cache/$sku"
new_tree "$data" "$sku" || finish error 2
pod_env "$data" "$tree" >"$out/env.txt" || finish error 2
mapfile -t envs <"$out/env.txt"
echo "cache env (warmd cache env, ${tree} as the pod's mount):"
printf '  %s\n' "${envs[@]}"
for e in "${envs[@]}"; do mkdir -p "${e#*=}"; done

cat >"$out/compile_block.py" <<'PY'
# One transformer block compiled by torch.compile (Inductor generates Triton kernels on CUDA). Prints
# one JSON line: first-call seconds (trace + compile + run), steady-state ms, Inductor cache counters.
import json, os, sys, time
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo.utils import counters

class Block(nn.Module):
    def __init__(self, d=1024, h=16, ff=4096):
        super().__init__()
        self.h = h
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, ff), nn.Linear(ff, d)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.down(F.gelu(self.up(self.ln2(x))))

torch.manual_seed(0)
m = Block().cuda().half().eval()
x = torch.randn(8, 256, 1024, device="cuda", dtype=torch.half)
with torch.no_grad():
    ref = m(x)
    torch.cuda.synchronize()
    c = torch.compile(m, backend="inductor")
    t0 = time.perf_counter()
    y = c(x)
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _ in range(20):
        c(x)
    torch.cuda.synchronize()
    steady = (time.perf_counter() - t1) / 20
ind = counters["inductor"]
print(json.dumps({
    "torch": torch.__version__, "device": torch.cuda.get_device_name(0),
    "compile_seconds": round(first, 3), "steady_ms": round(steady * 1000, 3),
    "max_abs_diff": float((y - ref).abs().max()),
    "fxgraph_cache_hit": ind.get("fxgraph_cache_hit", 0), "fxgraph_cache_miss": ind.get("fxgraph_cache_miss", 0),
    "autograd_cache_hit": counters["aot_autograd"].get("autograd_cache_hit", 0),
}))
PY

compile_run() { # compile_run NAME: one fresh process with the cache env; its JSON line in $out/NAME.json
	echo "== torch.compile ($1)"
	if ! env "${envs[@]}" TORCHINDUCTOR_FX_GRAPH_CACHE=1 TORCHINDUCTOR_AUTOGRAD_CACHE=1 \
		timeout 150 "$py" "$out/compile_block.py" >"$out/$1.json" 2>"$out/$1.err"; then
		tail -20 "$out/$1.err" >&2
		finish failed 1
	fi
	cat "$out/$1.json"
}
compile_run cold
cold_files=$(list_tree "$tree" | wc -l | tr -d ' ')
round_trip "$data" "$sku" || { echo "device-check: capture/restore did not restore the tree" >&2; finish failed 1; }
compile_run restored

echo "== result"
python3 - "$out/cold.json" "$out/restored.json" "$cold_files" "$bundles" "$bundle_bytes" "$after" <<'PY'
import json, sys
cold, warm = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
files, bundles, nbytes, restored = sys.argv[3:7]
hit = warm["fxgraph_cache_hit"] > 0 and warm["fxgraph_cache_miss"] == 0
print("device           :", cold["device"], "| torch", cold["torch"])
print("compile seconds  : cold %.2f s, restored %.2f s (%.1fx)" % (cold["compile_seconds"], warm["compile_seconds"],
      cold["compile_seconds"] / max(warm["compile_seconds"], 1e-9)))
print("files captured   : %s in %s bundles (%s bytes); %s restored" % (files, bundles, nbytes, restored))
print("second run       : %s (FX graph cache hits %d, misses %d; cold run: %d hits, %d misses)" % (
      "HIT" if hit else "MISS", warm["fxgraph_cache_hit"], warm["fxgraph_cache_miss"],
      cold["fxgraph_cache_hit"], cold["fxgraph_cache_miss"]))
sys.exit(0 if hit else 1)
PY
rc=$?
((rc == 0)) && finish ok 0
finish failed 1
