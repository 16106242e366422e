#!/usr/bin/env bash
# The GPU measurements of one session on the device machine, in stages that fit its 10-minute calls.
# Results go to $OUT (./gpu-out without one), which returns at most 8 files a call: the benchmark
# results of every stage in one $OUT/<device>.json, a log per stage, for claims an archive of the
# report and the run records. A norms stage compiles ~150 graphs: give each its own call. train's
# figure4 part trains 3 x 7,031 steps (5 seeds each, AG News at its official size): give it a call
# of its own too, after `train/steps fastpath`.
#
#   stages: norms-bf16 norms-fp32   norm-kernel benchmarks, one dtype each (~150 compiles each)
#           train                   training-core benchmarks and the paper-tier Figure 4 wall time
#           fastpath                tests marked gpu under tests/ (bf16+compile within tolerance of
#                                   fp32, the CUDA batching rule for attention)
#           claims PATH...          `pytest PATH -m gpu` (the paper tier) for the given claim files
#   STAGE/PART runs one part of a stage (what $OUT/not-run.txt lists), e.g. norms-fp32/l2:
#           norms parts layernorm-rmsnorm (with the L2-flush benchmark), l2 (l2, scaled_l2,
#           l2_affine), dyt-batchnorm-none; train parts steps, figure4
#   GPU_SESSION_PYTEST_ARGS: more pytest arguments for every part, e.g. "--collect-only -q" to see
#           what a stage would run
#
# Before the first call, here: copy the data beside the code, since ../shared does not travel:
#   mkdir -p .gpu-data && cp -r ../shared/data/. .gpu-data/
# then run `bash tests/benchmarks/gpu_session.sh STAGE [STAGE...]` with carry [".gpu-data"].
#
# The call's limit kills everything at once and pytest-benchmark writes its JSON only at the end,
# so each stage runs in parts (norms: three groups of kinds; train: step benchmarks, then Figure 4)
# under `timeout -s INT` (an interrupted pytest still writes the cases it finished), and no part
# starts or runs past GPU_SESSION_BUDGET_S (default 540 s) from the script's start. Each part's
# JSON goes to GPU_SESSION_PARTS (default .gpu-parts, git-ignored), and every JSON there is merged
# into $OUT/<device>.json as each part ends. A part skips the cases any JSON there already holds,
# so a part cut short resumes where it stopped. $OUT/not-run.txt lists the parts not run or cut
# short, as arguments for the next call. On a fresh machine (a warm one keeps .gpu-parts), resume
# by copying the returned <device>.json into .gpu-parts/ here and carrying ".gpu-parts" too.
# Finally: cp <device>.json tests/benchmarks/results/ and commit it.
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export NORMSYS_DATA="${NORMSYS_DATA:-$PWD/.gpu-data}" NORMSYS_REQUIRE_DATA=1
export NORMSYS_CACHE="${NORMSYS_CACHE:-/tmp/normsys-cache}"
out="${OUT:-$PWD/gpu-out}"
mkdir -p "$out"
device=$(python3 -c "import torch; print(torch.cuda.get_device_name().replace(' ', '-')
                     if torch.cuda.is_available() else 'cpu')")
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv \
  >"$out/nvidia-smi.csv" 2>/dev/null || true
status=0
budget=${GPU_SESSION_BUDGET_S:-540}
parts="${GPU_SESSION_PARTS:-$PWD/.gpu-parts}"  # one device's results so far, JSON per part
mkdir -p "$parts"
shopt -s nullglob

wanted() {  # wanted PART: no part named with the stage, or this one
  [ -z "$only" ] || [ "$only" = "$1" ]
}

pytest_part() {  # pytest_part STAGE LABEL ARGS...: pytest -m gpu within the budget, log under $OUT
  local stage=$1 label=$2; shift 2
  local left=$((budget - SECONDS))
  if [ "$left" -lt 30 ]; then
    echo "$label" >>"$out/not-run.txt"
    echo "gpu_session: budget spent, not run: $label" >&2; status=1; return 1
  fi
  echo "== $label (${left}s left)" >>"$out/$stage.log"
  # SIGINT first: pytest stops as if interrupted and still writes what it measured
  timeout --signal=INT --kill-after=20 "$left" \
    python3 -m pytest -p no:cacheprovider -m gpu -ra "$@" ${GPU_SESSION_PYTEST_ARGS:-} 2>&1 \
    | tee -a "$out/$stage.log"
  local rc=${PIPESTATUS[0]}
  case "$rc" in
    0) ;;
    5) echo "gpu_session: $label: nothing left to run" >>"$out/$stage.log" ;;  # all measured
    124|137) echo "$label" >>"$out/not-run.txt"
       echo "gpu_session: $label: cut short at the budget; listed to resume" >&2; status=1 ;;
    *) echo "gpu_session: $label: pytest exited $rc" >&2; status=1 ;;
  esac
}

bench_part() {  # bench_part STAGE PART ARGS...: a benchmark part, skipping the cases measured so far
  local stage=$1 part=$2; shift 2
  local json="$parts/$stage-$part-$(date +%s).json" skip=() id earlier=("$parts"/*.json)
  # read line by line: an unquoted $(...) would glob-expand the ids' [params] (to nothing)
  [ ${#earlier[@]} -eq 0 ] || while IFS= read -r id; do
    [ -n "$id" ] && skip+=(--deselect "$id")
  done < <(python3 -m normsys.bench measured "${earlier[@]}")
  pytest_part "$stage" "$stage/$part" "$@" "${skip[@]}" --benchmark-enable \
    --benchmark-json "$json" || return 0
  [ -s "$json" ] || { rm -f "$json"; return 0; }  # nothing measured (all skipped, --collect-only)
  python3 -m normsys.bench merge "$out/$device.json" "$parts"/*.json || true
}

while [ $# -gt 0 ]; do
  stage=${1%%/*} only=${1#"$stage"}; only=${only#/}; shift
  case "$stage" in
    norms-bf16|norms-fp32)
      dtype=${stage#norms-}  # PART:-k expression; the targets' kinds first. The flush benchmark
      # (test_layernorm_..._l2_flush) is a layernorm one: the l2 part must not match it too
      for group in "layernorm-rmsnorm:layernorm or rmsnorm" "l2:l2 and not flush" \
                   "dyt-batchnorm-none:dyt or batchnorm or none"; do
        part=${group%%:*}
        wanted "$part" && bench_part "$stage" "$part" tests/benchmarks/test_bench_norms.py \
          -k "$dtype and (${group#*:})"
      done ;;
    train)
      wanted steps && bench_part train steps tests/benchmarks/test_bench_train.py -k "not figure4"
      wanted figure4 && bench_part train figure4 tests/benchmarks/test_bench_train.py -k figure4 ;;
    fastpath)
      pytest_part fastpath fastpath tests --ignore tests/benchmarks ;;
    claims)
      # the report is a folder of files; $OUT returns at most 8 files, so it travels as one archive
      pytest_part claims "claims $*" "$@" --claims-report /tmp/claims-report; shift $#
      # run records only: the trained weights (*.pt) would pass the 16 MB a file that comes back
      tar czf "$out/claims-report.tgz" -C / --exclude='*.pt' --exclude='*.lock' \
        tmp/claims-report "${NORMSYS_CACHE#/}/runs" || true ;;
    *)
      echo "gpu_session: unknown stage '$stage' (norms-bf16, norms-fp32, train, fastpath, claims)" >&2
      exit 2 ;;
  esac
done
# what was measured so far, as README's table with issue 5's targets, last in the call's output
[ -s "$out/$device.json" ] && python3 -m normsys.bench table "$out/$device.json"
exit "$status"
