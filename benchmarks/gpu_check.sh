#!/usr/bin/env bash
# The GPU check, ready for the first GPU this project is lent (issue 37 item 5): day3 trained in bf16 and in fp16
# (with its GradScaler), verify-resume, a SIGKILL mid-run and a resume compared bit for bit with a straight run,
# --nproc 1 against 2 ranks with canonical pieces, and the deterministic settings timed against torch's defaults;
# one table at the end. At most about 6 minutes on one GPU (day3 shortened to --steps).
#
#   bash benchmarks/gpu_check.sh --prepare .gpu-wheels   # here, before a GPU is lent: the wheels its image lacks
#   bash benchmarks/gpu_check.sh                  # on a GPU box: --device cuda, day3's shapes, from .gpu-wheels/
#   bash benchmarks/gpu_check.sh --device cpu     # tiny shapes on the CPU: the script itself, tested by CI
#   bash benchmarks/gpu_check.sh --steps 200 --keep /tmp/gpu-check   # longer runs; keep the scratch home
#
# A lent GPU runs its own image (Python 3.12, torch with CUDA, typer, rich, tokenizers, pyyaml, jinja2, numpy) and
# reaches no package index; only the working tree and a few carried files arrive. --prepare DIR (here, with an index)
# fills DIR with pure-Python wheels of what the image lacks (sqlite-utils and what it needs, typer and pip at the
# versions installed here) and a wheel of octlm built from this tree. Given DIR (--wheels DIR, or .gpu-wheels/ at
# the repository's root when it is there), the check first makes a venv over --python's packages
# (--system-site-packages: the image's torch), installs octlm from DIR with pip --no-index, and runs that octlm;
# without, the python on PATH must import octlm and torch already.
#
# Exit 0 when every check that ran passed (a check that cannot run here says why in its row), 1 otherwise; 2 when
# the check cannot start (bad arguments, wheels missing or built from another tree, an install that failed).
set -uo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
device=cuda steps="" keep="" prepare="" wheels="" base=""
while [ $# -gt 0 ]; do
    case "$1" in
        --device) device="$2"; shift 2 ;;
        --steps) steps="$2"; shift 2 ;;
        --keep) keep="$2"; shift 2 ;;
        --prepare) prepare="$2"; shift 2 ;;
        --wheels) wheels="$2"; shift 2 ;;
        --python) base="$2"; shift 2 ;;
        -h|--help) sed -n 2,21p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
case "$device" in cuda|cpu) ;; *) echo "gpu_check.sh: --device cuda or cpu, not $device" >&2; exit 2 ;; esac
base="${base:-$(command -v python3 || command -v python)}"
# An absolute path (the check runs from another folder), not resolved: a venv's python is a link to its base's.
case "$base" in
    */*) base="$(cd "$(dirname "$base")" && pwd)/$(basename "$base")" ;;
    *) base="$(command -v "$base")" ;;
esac
scratch="$(mktemp -d)"  # the venv, a copy of the source, pins: gone at exit
trap 'rm -rf "$scratch"' EXIT

tree_digest() {  # what the octlm wheel is built from, as the working tree's copy arrives on the GPU machine
    (cd "$root" && find octlm octlm_cli pyproject.toml README.md -type f ! -path '*/__pycache__/*' ! -name '*.pyc' \
        -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}

prepare_wheels() {  # $1: the folder, made anew: pure-Python wheels the image lacks, octlm's wheel, the tree's digest
    local dir="$1" version impure
    # Made anew, but only ever a folder of wheels: --prepare . must not empty the repository.
    if [ -d "$dir" ] && [ -n "$(ls -A "$dir" | grep -v -e '\.whl$' -e '^tree\.sha256$')" ]; then
        echo "gpu_check.sh: $dir holds other files than wheels: name a new folder (.gpu-wheels is ignored by git)" >&2
        exit 2
    fi
    rm -f "$dir"/*.whl "$dir/tree.sha256" && mkdir -p "$dir" || exit 2
    # The versions installed here are the ones tested here: every package pinned to them where it is installed.
    "$base" -m pip list --format=freeze --exclude-editable 2>/dev/null | grep -E '^[A-Za-z0-9_.-]+==' \
        >"$scratch/pins.txt"
    # For the image's Python 3.12 and for this one (CI's stand-in image has it); one file serves both when pure.
    for version in 3.12 "$("$base" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"; do
        "$base" -m pip download --disable-pip-version-check --only-binary=:all: --python-version "$version" \
            -qq -c "$scratch/pins.txt" -d "$dir" sqlite-utils typer pip ||
            { echo "gpu_check.sh: pip download for Python $version failed (an index is needed here)" >&2; exit 2; }
    done
    impure=$(cd "$dir" && ls | grep -v -- '-none-any\.whl$')
    [ -z "$impure" ] || { echo "gpu_check.sh: not pure-Python, so not for any machine: $impure" >&2; exit 2; }
    # octlm from a clean copy of its source (a build/ folder of the tree could hold modules deleted since)
    mkdir "$scratch/src" &&
        cp -R "$root/pyproject.toml" "$root/README.md" "$root/octlm" "$root/octlm_cli" "$scratch/src/"
    find "$scratch/src" -name __pycache__ -prune -exec rm -rf {} +
    # Built as pip install builds it, in isolation: pyproject's setuptools (a venv's own may be too old to read it)
    "$base" -m pip wheel --quiet --disable-pip-version-check --no-deps -w "$dir" "$scratch/src" ||
        { echo "gpu_check.sh: octlm's wheel did not build" >&2; exit 2; }
    tree_digest >"$dir/tree.sha256"
    printf 'gpu_check.sh: %s wheels in %s (%s): carry it with the working tree, then run bash %s there\n' \
        "$(ls "$dir" | grep -c '\.whl$')" "$dir" "$(du -sh "$dir" | cut -f1)" "benchmarks/gpu_check.sh"
}

install_wheels() {  # a venv over $base's packages, octlm and what the image lacks installed from $wheels; sets $python
    local venv="$scratch/venv" pip_wheel octlm_wheel sites purelib
    [ "$(cat "$wheels/tree.sha256" 2>/dev/null)" = "$(tree_digest)" ] ||
        { echo "gpu_check.sh: the wheels in $wheels were not built from this tree: run --prepare $wheels again" >&2
          exit 2; }
    pip_wheel=$(ls "$wheels"/pip-*.whl 2>/dev/null | tail -n 1)
    octlm_wheel=$(ls "$wheels"/octlm-*.whl 2>/dev/null | tail -n 1)
    [ -n "$pip_wheel" ] && [ -n "$octlm_wheel" ] ||
        { echo "gpu_check.sh: no pip or octlm wheel in $wheels: run --prepare $wheels again" >&2; exit 2; }
    # --without-pip: no ensurepip needed (Debian's Pythons lack it); pip runs from its carried wheel.
    "$base" -m venv --system-site-packages --without-pip "$venv" ||
        { echo "gpu_check.sh: $base -m venv failed" >&2; exit 2; }
    # What $base sees, seen by the venv too (its system site-packages already; where $base is itself a venv, as CI's
    # stand-in image is, its own site-packages), after the venv's own.
    sites=$("$base" -c 'import site; print("; ".join("site.addsitedir(%r)" % d for d in site.getsitepackages()))')
    purelib=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "import site; $sites" >"$purelib/gpu_check_base.pth"
    local pip=("$venv/bin/python" "$pip_wheel/pip" install --quiet --disable-pip-version-check --no-index
               --find-links "$wheels" --no-warn-script-location)
    # octlm into the venv whatever $base holds, then what it needs and $base lacks (or holds at another version)
    "${pip[@]}" --no-deps --force-reinstall "$octlm_wheel" && "${pip[@]}" "$octlm_wheel" ||
        { echo "gpu_check.sh: installing from $wheels failed (the line above says what is missing)" >&2; exit 2; }
    python="$venv/bin/python"
    "$python" -c 'import sys, octlm, sqlite_utils, torch; sys.exit(not octlm.__file__.startswith(sys.prefix))' ||
        { echo "gpu_check.sh: octlm is not the one installed in $venv" >&2; exit 2; }
    installed=$("$python" -c 'import importlib.metadata as m, sysconfig
print(", ".join(sorted(f"{d.name} {d.version}" for d in m.distributions(path=[sysconfig.get_paths()["purelib"]]))))')
}

if [ -n "$prepare" ]; then prepare_wheels "$prepare"; exit 0; fi
[ -n "$wheels" ] || { [ -d "$root/.gpu-wheels" ] && wheels="$root/.gpu-wheels"; }
[ -n "$keep" ] && { mkdir -p "$keep" && keep="$(cd "$keep" && pwd)"; }
if [ -n "$wheels" ]; then
    [ -d "$wheels" ] || { echo "gpu_check.sh: no folder $wheels: make it here with --prepare $wheels" >&2; exit 2; }
    wheels="$(cd "$wheels" && pwd)"
    # The installed octlm, not a tree's: neither PYTHONPATH's nor the current folder's (python -c and -m put it first)
    unset PYTHONPATH
    cd "$scratch" || exit 2
    install_wheels
    from="the wheels in $wheels (installed from them: $installed)"
else
    python="$base"
    "$python" -c 'import octlm, torch' 2>/dev/null ||
        { echo "gpu_check.sh: octlm and torch are not importable by $python: pip install -e . first" >&2; exit 2; }
    from="as $python imports it"
fi
octlm=("$python" -m octlm)  # octlm's own children run on the same interpreter (sys.executable)
home="${keep:-$scratch/home}"
mkdir -p "$home/experiments"
export NO_COLOR=1 OCTLM_NO_LOAD_CHECK=1

if [ "$device" = cpu ]; then  # the script's own test: tiny shapes, day1's corpus
    steps="${steps:-8}"
    shape=(--set 'data.sources=[builtin:docs]' --set data.max_bytes=0 --set tokenizer.vocab_size=512
           --set model.context_length=32 --set model.d_model=32 --set model.n_layers=2 --set model.n_heads=2
           --set training.batch_size=4 --set training.compile=false)
else
    steps="${steps:-300}"
    shape=()
fi
half=$((steps / 2))
common=(--preset day3 "${shape[@]}" --set "training.steps=$steps" --set training.warmup_steps=2
        --set "training.eval_interval=$half" --set "checkpoint.interval=$half" --set training.eval_tokens=4096
        --set "training.device=$device")
rows=()
failed=0
row() {  # check, result, seconds
    rows+=("$(printf '%-34s %-54s %8s' "$1" "$2" "$3")")
    case "$2" in PASS*|ok*|skipped*) ;; *) failed=1 ;; esac
}
timed() {  # run "$@" quietly; set $took (seconds) and $out (stdout), return its exit code
    local started=$SECONDS code
    out="$("$@" 2>"$home/last.err")"; code=$?
    took=$((SECONDS - started))
    return $code
}
new() { "${octlm[@]}" --home "$home" new "${common[@]}" "$@" 2>>"$home/new.err"; }
same_bits() {  # the final checkpoints of two experiments: every tensor identical?
    "$python" - "$home" "$1" "$2" "$steps" <<'PY'
import sys
from pathlib import Path
import torch
home, a, b, step = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
load = lambda e: torch.load(home / "checkpoints" / e / f"step-{step:06d}.pt", map_location="cpu", weights_only=False)
x, y = load(a), load(b)
same = all(torch.equal(x["model"][k], y["model"][k]) for k in x["model"]) and x["model"].keys() == y["model"].keys()
print("identical" if same else "differ")
PY
}

# 1-2. day3 in bf16 and in fp16 (fp16 steps through its GradScaler)
for precision in bf16 fp16; do
    id=$(new --set "training.precision=$precision" --description "gpu check: $precision")
    if timed "${octlm[@]}" --home "$home" train "$id" --json -q; then
        loss=$("$python" - "$out" <<'PY'
import json, sys
done = json.loads(sys.argv[1])
print(f"eval loss {done['eval_loss']:.4f}, {done['tokens_per_second']:,.0f} tokens/s")
PY
)
        row "train day3 $precision ($steps steps)" "ok: $loss" "$took"
    else
        row "train day3 $precision ($steps steps)" "FAIL: $(tail -n 1 "$home/last.err")" "$took"
    fi
    eval "id_$precision=$id"
done

# 3. verify-resume of the bf16 run, split at the middle
if timed "${octlm[@]}" --home "$home" verify-resume "$id_bf16" --split-at "$half" --json; then
    row "verify-resume bf16 --split-at $half" "PASS: every tensor, rng, data order and run file" "$took"
else
    row "verify-resume bf16 --split-at $half" "FAIL: $(tail -n 1 "$home/last.err")" "$took"
fi

# 4. SIGKILL after the first checkpoint, resume, and compare with the straight bf16 run
killed=$(new --set training.precision=bf16 --description "gpu check: killed")
started=$SECONDS
"${octlm[@]}" --home "$home" train "$killed" -q 2>"$home/killed.err" & pid=$!
until [ -e "$home/checkpoints/$killed/step-$(printf %06d "$half").pt" ] || ! kill -0 $pid 2>/dev/null; do sleep 0.2; done
kill -KILL $pid 2>/dev/null; wait $pid 2>/dev/null
if "${octlm[@]}" --home "$home" resume "$killed" -q 2>>"$home/killed.err"; then
    verdict=$(same_bits "$id_bf16" "$killed")
    [ "$verdict" = identical ] && said="PASS: killed at >= $half, resumed: identical" || said="FAIL: $verdict"
    row "SIGKILL mid-run, resume" "$said" $((SECONDS - started))
else
    row "SIGKILL mid-run, resume" "FAIL: $(tail -n 1 "$home/killed.err")" $((SECONDS - started))
fi

# 5. --nproc 1 against 2 ranks, both with canonical pieces (training.micro_batches)
gpus=$("$python" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
if [ "$device" = cuda ] && [ "$gpus" -lt 2 ]; then
    row "--nproc 1 vs 2 ranks, pieces" "skipped: $gpus GPU here (2 ranks need 2)" 0
else
    one=$(new --set training.micro_batches=4 --description "gpu check: pieces, 1 process")
    two=$(new --set training.micro_batches=4 --description "gpu check: pieces, 2 ranks")
    started=$SECONDS
    if "${octlm[@]}" --home "$home" train "$one" -q 2>"$home/one.err" &&
        "${octlm[@]}" --home "$home" train "$two" --nproc 2 -q 2>"$home/two.err"; then
        verdict=$(same_bits "$one" "$two")
        [ "$verdict" = identical ] && said="PASS: identical weights" || said="FAIL: $verdict"
        row "--nproc 1 vs 2 ranks, pieces" "$said" $((SECONDS - started))
    else
        row "--nproc 1 vs 2 ranks, pieces" "FAIL: $(cat "$home/one.err" "$home/two.err" | tail -n 1)" $((SECONDS - started))
    fi
fi

# 6. the deterministic settings against torch's defaults: one step of the bf16 config's model, timed
timing=$("$python" - "$device" "${shape[@]+--tiny}" <<'PY'
import os, statistics, sys, time
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch
from octlm.config.presets import preset
from octlm import config as cfg
from octlm.train.model.decoder import Decoder
device, tiny = sys.argv[1], "--tiny" in sys.argv
values = preset("day3")
if tiny:
    values["model"] = {"context_length": 32, "d_model": 32, "n_layers": 2, "n_heads": 2}
    values["tokenizer"] = {"vocab_size": 512}
config = cfg.from_dict(values)
torch.manual_seed(0)
model = Decoder(config).to(device)
batch = torch.randint(0, config.tokenizer.vocab_size, (8, config.model.context_length + 1), device=device)

def step() -> float:
    start = time.perf_counter()
    with torch.autocast(device_type=device, dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(batch[:, :-1]).float().flatten(0, 1), batch[:, 1:].flatten())
    loss.backward()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start

def timed(deterministic: bool) -> float:
    torch.use_deterministic_algorithms(deterministic)
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = deterministic, not deterministic
    torch.utils.deterministic.fill_uninitialized_memory = deterministic
    for _ in range(2):
        step()
    return statistics.median(step() for _ in range(10))

rounds = [(timed(False), timed(True)) for _ in range(3)]  # alternating
default, pinned = (statistics.median(r[i] for r in rounds) for i in (0, 1))
print(f"{pinned / default:.2f}x the default's step time ({pinned * 1e3:.1f} ms against {default * 1e3:.1f} ms)")
PY
)
if [ -n "$timing" ]; then row "deterministic settings vs default" "ok: $timing" 0; else row "deterministic settings vs default" "FAIL: the timing did not run" 0; fi

printf '\ngpu check on %s (%s), %s steps, load %s\n' "$device" \
    "$("$python" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")')" \
    "$steps" "$(cut -d' ' -f1 /proc/loadavg)"
printf 'octlm from %s; %s\n' "$from" \
    "$("$python" -c 'import sys, torch; print(f"Python {sys.version.split()[0]}, torch {torch.__version__}")')"
printf '%-34s %-54s %8s\n' check result seconds
printf '%s\n' "${rows[@]}"
exit $failed
