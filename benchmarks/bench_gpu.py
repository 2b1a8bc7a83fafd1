"""GPU offload check and timing: the generation stage's own code (LlamaGenerator, the
paper's prompts and grammar) on a GGUF model, all layers on the GPU vs all on the CPU.

    python benchmarks/bench_gpu.py MODEL.gguf [--calls 30] [--threads 4]

Reports whether this llama-cpp-python build offloads to a GPU (the preflight every
model-calling rule runs), calls/s and new tokens/s with n_gpu_layers -1 and 0, and the
GPU memory in use (nvidia-smi) before loading and while the model is loaded. Run it on a
GPU machine after the CUDA build (README: "Running the paper on a GPU machine").
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

import llama_cpp  # noqa: E402  (before numpy and torch: grabrag.generation.generator.LLAMA_FIRST)

from grabrag.generation.generator import GenerationError, GenerationSettings, LlamaGenerator  # noqa: E402
from grabrag.generation.prompts import CONTEXT_PROMPTS, messages_for  # noqa: E402

CONTEXT = (
    "Passage 1: The Eiffel Tower was completed in 1889 for the World's Fair in Paris. "
    "Passage 2: Gustave Eiffel's company designed and built the tower. "
) * 12
QUESTIONS = ("When was the Eiffel Tower completed?", "Who built the Eiffel Tower?")


def gpu_memory_mib() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except OSError:
        return "n/a (no nvidia-smi)"
    return out.stdout.strip() or out.stderr.strip()


def run(model: Path, n_gpu_layers: int, calls: int, threads: int) -> dict[str, float | str]:
    before = gpu_memory_mib()
    generator = LlamaGenerator(
        model, GenerationSettings(max_tokens=128), n_threads=threads, n_gpu_layers=n_gpu_layers
    )
    loaded = gpu_memory_mib()
    generator.complete(messages_for("P1", QUESTIONS[0], CONTEXT))  # warm-up
    tokens = 0
    started = time.perf_counter()
    for k in range(calls):
        if k % len(CONTEXT_PROMPTS) == 0:
            generator.reset()
        prompt = CONTEXT_PROMPTS[k % len(CONTEXT_PROMPTS)]
        result = generator.complete(messages_for(prompt, QUESTIONS[k % 2], CONTEXT))
        tokens += result["completion_tokens"]
    seconds = time.perf_counter() - started
    return {
        "n_gpu_layers": n_gpu_layers,
        "calls/s": calls / seconds,
        "new tokens/s": tokens / seconds,
        "GPU MiB before": before,
        "GPU MiB loaded": loaded,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    print(f"llama-cpp-python {llama_cpp.__version__}")
    print(f"GPU offload supported by this build: {bool(llama_cpp.llama_supports_gpu_offload())}")
    for layers in (-1, 0):
        try:
            print(run(args.model, layers, args.calls, args.threads))
        except GenerationError as error:  # the preflight refusing GPU offload on a CPU build
            print(f"n_gpu_layers {layers}: refused: {error}")


if __name__ == "__main__":
    main()
