#!/usr/bin/env bash
# On a machine with one NVIDIA GPU (bench/gpu/README.md): compile llama-server with CUDA
# from the pinned llama.cpp source, write the GGUF files, measure every case of cases.json.
#   bash bench/gpu/run.sh SOURCE.tar.xz     (results under $OUT, as they come)
set -u
OUT=${OUT:-/tmp/bench-gpu}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
SOURCE=$(realpath "${1:?the llama.cpp source tarball (bench/gpu/README.md)}")
START=$(date +%s); DEADLINE=$((START + ${BUDGET_S:-540}))
log() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/progress.log"; }

export PATH=/usr/local/cuda/bin:$PATH
NVCC=$(command -v nvcc || find / -xdev -name nvcc -type f 2>/dev/null | head -1)
{ nvidia-smi; echo "nvcc: $NVCC"; "$NVCC" --version; cmake --version; nproc; free -g
  df -h /dev/shm /tmp; } > "$OUT/machine.txt" 2>&1
W=/tmp/bench-gpu-work
[ "$(df --output=avail -BG /dev/shm | tail -1 | tr -dc 0-9)" -ge 60 ] && W=/dev/shm/bench-gpu-work
mkdir -p "$W/src" && tar xJf "$SOURCE" -C "$W/src" || { log "cannot unpack $SOURCE"; exit 1; }
export PYTHONPATH=$W/src/gguf-py
log "work in $W, nvcc $NVCC"

# The flags of llm_operator/local/llama_build.py (COMMON_FLAGS, X86_64_FLAGS), with CUDA
# for the H100/H200's compute capability 9.0.
( cmake -S "$W/src" -B "$W/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DGGML_NATIVE=OFF -DGGML_AVX=ON \
    -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
    -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$NVCC" \
  && cmake --build "$W/build" --target llama-server llama-quantize -j "$(nproc)" ) \
  > "$OUT/build.log" 2>&1 &
BUILD=$!
( python3 "$HERE/make_gguf.py" llama-3.1-8b F16 "$W/llama-3.1-8b-f16.gguf" \
  && python3 "$HERE/make_gguf.py" gemma-3-4b F16 "$W/gemma-3-4b-f16.gguf" ) > "$OUT/gguf.log" 2>&1 &
GEN=$!
if ! wait $BUILD; then log "build failed"; tail -30 "$OUT/build.log"; exit 1; fi
log "built"
wait $GEN || { log "writing the F16 files failed"; cat "$OUT/gguf.log"; exit 1; }
log "F16 files written"
BIN=$W/build/bin
"$BIN/llama-quantize" "$W/llama-3.1-8b-f16.gguf" "$W/llama-3.1-8b-q4km.gguf" Q4_K_M "$(nproc)" \
  > "$OUT/quantize.log" 2>&1 || { log "quantize failed"; tail "$OUT/quantize.log"; }
log "llama Q4_K_M quantized"
( "$BIN/llama-quantize" "$W/gemma-3-4b-f16.gguf" "$W/gemma-3-4b-q4km.gguf" Q4_K_M 8 \
  && rm "$W/gemma-3-4b-f16.gguf" ) >> "$OUT/quantize.log" 2>&1 &
GEMMA=$!

measure() { python3 "$HERE/measure.py" --cases "$HERE/cases.json" --server "$BIN/llama-server" \
  --models "$W" --out "$OUT/results.jsonl" --deadline $((DEADLINE - 40)) --only "$@"; }
measure llama-31-8b-q4km-8k-x1 llama-31-8b-q4km-16k-x4 llama-31-8b-f16-8k-x1 \
  llama-31-8b-f16-16k-x4 llama-31-8b-q4km-4k-x8
rm -f "$W/llama-3.1-8b-f16.gguf"
log "llama measured"
python3 "$HERE/make_gguf.py" qwen3-30b-a3b Q8_0 "$W/qwen3-30b-a3b-q80.gguf" >> "$OUT/gguf.log" 2>&1 &
MOE=$!
wait $GEMMA || log "gemma quantize failed"
measure gemma-3-4b-q4km-8k-x1 gemma-3-4b-q4km-16k-x4
log "gemma measured"
wait $MOE
measure qwen3-30b-a3b-q80-8k-x1 qwen3-30b-a3b-q80-16k-x4
log "done"
