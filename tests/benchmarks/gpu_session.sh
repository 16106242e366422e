#!/usr/bin/env bash
# The GPU measurements of one session on the device machine, in stages that fit its 10-minute calls.
# Results (benchmark JSON, logs; for claims an archive of the report and the run records) go to $OUT
# (./gpu-out without one), which returns at most 8 files a call. A norms stage compiles ~150 graphs:
# give each its own call; train and fastpath fit one call together.
#
#   stages: norms-bf16 norms-fp32   norm-kernel benchmarks, one dtype each (~150 compiles each)
#           train                   training-core benchmarks and the paper-tier Figure 4 wall time
#           fastpath                tests marked gpu under tests/ (bf16+compile within tolerance of
#                                   fp32, the CUDA batching rule for attention)
#           claims PATH...          `pytest PATH -m gpu` (the paper tier) for the given claim files
#
# Before the call, here: copy the data beside the code, since ../shared does not travel:
#   mkdir -p .gpu-data && cp -r ../shared/data/. .gpu-data/
# then run `bash tests/benchmarks/gpu_session.sh STAGE [STAGE...]` with carry [".gpu-data"].
# Afterwards: python -m normsys.bench merge tests/benchmarks/results/<device>.json <the JSONs>
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
pytest_to() {  # pytest_to LOGNAME ARGS...: run pytest, log under $OUT, remember a failure
  local log="$out/$1.log"; shift
  python3 -m pytest -p no:cacheprovider -m gpu -ra "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { echo "gpu_session: pytest $* exited $rc" >&2; status=1; }
}
while [ $# -gt 0 ]; do
  stage=$1; shift
  case "$stage" in
    norms-bf16|norms-fp32)
      pytest_to "$stage" tests/benchmarks/test_bench_norms.py -k "${stage#norms-}" \
        --benchmark-enable --benchmark-json "$out/$device-$stage.json" ;;
    train)
      pytest_to train tests/benchmarks/test_bench_train.py \
        --benchmark-enable --benchmark-json "$out/$device-train.json" ;;
    fastpath)
      pytest_to fastpath tests --ignore tests/benchmarks ;;
    claims)
      # the report is a folder of files; $OUT returns at most 8 files, so it travels as one archive
      pytest_to claims "$@" --claims-report /tmp/claims-report; shift $#
      # run records only: the trained weights (*.pt) would pass the 16 MB a file that comes back
      tar czf "$out/claims-report.tgz" -C / --exclude='*.pt' --exclude='*.lock' \
        tmp/claims-report "${NORMSYS_CACHE#/}/runs" || true ;;
    *)
      echo "gpu_session: unknown stage '$stage' (norms-bf16, norms-fp32, train, fastpath, claims)" >&2
      exit 2 ;;
  esac
done
exit "$status"
