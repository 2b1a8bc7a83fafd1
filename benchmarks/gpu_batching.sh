#!/usr/bin/env bash
# benchmarks/bench_batching.py --gpu on a bare GPU machine that reaches no registry, as one
# call: build llama-cpp-python with CUDA for sm_90 (an H100/H200) from a carried sdist, then
# the benchmark. It reads, from the repository root, a folder .gpu/ (git-ignored) holding:
#   llama_cpp_python-0.3.36.tar.gz   the sdist, its vendor/llama.cpp models/ and docs/ dropped
#   whl/diskcache-*.whl              llama-cpp-python's one dependency such an image lacks
#   resources/squad-v1.1-dev/        as the main job materialises it
#   resources/smollm2-135m-instruct-q4_1/  a manifest and any GGUF with SmolLM2's tokenizer
#                                    (the micro model will do: only the tokenizer is read)
# The build takes about 3.5 minutes on 16 cores, the 8B-shaped model about 3.
export PYTHONUNBUFFERED=1
t0=$(date +%s); stamp() { echo "[$(( $(date +%s) - t0 )) s] $*"; }
stamp start; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; nproc; python3 --version
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu/whl/*.whl || exit 1
mkdir -p /tmp/b && tar xzf .gpu/llama_cpp_python-0.3.36.tar.gz -C /tmp/b
stamp building
CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90-real -DLLAVA_BUILD=OFF -DGGML_NATIVE=ON" \
CMAKE_BUILD_PARALLEL_LEVEL=16 python3 -m pip install -q --no-index --no-deps --no-build-isolation \
  --no-compile --target /tmp/site /tmp/b/llama_cpp_python-0.3.36 > ${OUT:-/tmp}/build.log 2>&1 || { tail -40 ${OUT:-/tmp}/build.log; exit 1; }
stamp built
export PYTHONPATH=/tmp/site:/tmp/b/llama_cpp_python-0.3.36/vendor/llama.cpp/gguf-py
python3 -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__, 'gpu offload', llama_cpp.llama_supports_gpu_offload())"
[ -e resources ] || cp -r .gpu/resources resources  # a machine of its own: the stand-ins
python3 benchmarks/bench_batching.py --gpu --questions 8 --batches ${BATCHES:-4,16} 2>&1 | tee ${OUT:-/tmp}/bench.log
stamp done
