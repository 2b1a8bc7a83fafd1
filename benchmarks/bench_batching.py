"""Batched decoding against the sequential generation harness, at the paper's prompt shape.

    python benchmarks/bench_batching.py                       # CPU, the 135M model
    python benchmarks/bench_batching.py --quick               # the micro model, < 1 minute
    python benchmarks/bench_batching.py --gpu                 # build an 8B-shaped model, GPU

Every configuration runs the generation stage's own code (``LlamaGenerator`` and
``run_cells``: P0, P1 and P2 of each question, the paper's grammar, up to 512 new tokens)
in a fresh child process, so its peak memory is its own: first batch 1 (the sequential
path, KV-prefix reuse across a question's prompts), then each batch size, in one run.
Prompts are SQuAD dev questions, each with its gold paragraph and four more paragraphs of
the same article (the five passages of the paper's contexts) cut to the 1,500-token cap.

Per configuration: calls/s, generated tok/s, peak RSS (and peak GPU memory from
nvidia-smi), the ratio of calls/s to batch 1, and agreement with batch 1 (decision and
normalised answer; raw output). ``--quick`` also reruns the best batch and ends with
``batch B: X.XXx calls/s vs batch 1, outputs identical to a rerun: yes|no``.

``--gpu`` builds, on the machine it runs on, a model of Llama-3.1-8B's shape (32 layers,
4096 wide, 8 KV heads, 14336 feed-forward) with random weights and SmolLM2's tokenizer,
quantised to Q4_K_M by llama.cpp's own quantizer through the bindings (the weights do not
change the speed; the vocabulary is SmolLM2's 49k, not Llama-3's 128k, so the output layer
is smaller), and measures it with all layers on the GPU, flash attention off and on.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))
sys.path.insert(0, str(REPO))

import llama_cpp  # noqa: E402,F401  (before numpy and torch: grabrag.generation.generator.LLAMA_FIRST)

REAL_MODEL = REPO / "resources/smollm2-135m-instruct-q4_1/manifest.json"
SQUAD = REPO / "resources/squad-v1.1-dev/manifest.json"
PROMPTS = ("P0", "P1", "P2")
LLAMA_8B = {"n_embd": 4096, "n_layer": 32, "n_head": 32, "n_head_kv": 8, "n_ff": 14336}
SMALL = {"n_embd": 256, "n_layer": 4, "n_head": 8, "n_head_kv": 2, "n_ff": 512}


# --- prompts at the paper's shape ----------------------------------------------------------


def squad_rows(n_questions: int, max_context_tokens: int, tokenize) -> list[dict]:
    """n questions from distinct SQuAD articles, each with five passages (its own paragraph
    first, then the article's next ones) numbered as the paper's contexts, within the cap."""
    from grabrag.data.assets import resolve

    data = json.loads(resolve(SQUAD).read_text())["data"]
    rows = []
    for article in data:
        paragraphs = article["paragraphs"]
        if len(paragraphs) < 5:
            continue
        gold = paragraphs[0]
        passages = [p["context"] for p in paragraphs[:5]]
        context, used = "", 0
        for i, passage in enumerate(passages, start=1):
            block = f"[{i}] {article['title'].replace('_', ' ')}\n{passage}\n\n"
            n = len(tokenize(block))
            if used + n > max_context_tokens:
                break
            context, used = context + block, used + n
        qa = gold["qas"][0]
        rows.append(
            {
                "qid": qa["id"],
                "index": len(rows),
                "condition": "Q100",
                "question": qa["question"],
                "context": context.strip(),
            }
        )
        if len(rows) == n_questions:
            break
    return rows


# --- one configuration, in a child process ------------------------------------------------------


class GpuMemory:
    """Peak GPU memory in use (MiB, nvidia-smi polled every 0.2 s); None without a GPU."""

    def __init__(self) -> None:
        self.peak: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                    capture_output=True,
                    text=True,
                    timeout=10,
                ).stdout
                used = sum(int(x) for x in out.split())
                self.peak = max(self.peak or 0, used)
            except (OSError, ValueError, subprocess.SubprocessError):
                return
            self._stop.wait(0.2)

    def __enter__(self) -> GpuMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run_one(args: argparse.Namespace) -> dict:
    from grabrag.generation.generator import GenerationSettings, LlamaGenerator, run_cells

    settings = GenerationSettings(n_ctx=args.n_ctx, max_tokens=args.max_tokens)
    with GpuMemory() as gpu:
        generator = LlamaGenerator(
            args.model,
            settings,
            n_threads=args.threads,
            n_gpu_layers=args.n_gpu_layers,
            allow_cpu=True,
            batch=args.one,
            flash_attn=args.flash_attn,
        )
        rows = squad_rows(
            args.questions,
            args.context_tokens,
            lambda text: generator.llm.tokenize(text.encode(), add_bos=False),
        )
        checkpoint = Path(tempfile.mkdtemp()) / "checkpoint.jsonl"
        started = time.perf_counter()
        cells = run_cells(
            generator.complete,
            generator.reset,
            rows,
            PROMPTS,
            checkpoint,
            batcher=generator.batcher,
        )
        seconds = time.perf_counter() - started
    out_rows = [row for prompt in PROMPTS for row in cells[prompt]]
    return {
        "batch": args.one,
        "flash_attn": args.flash_attn,
        "calls": len(out_rows),
        "seconds": seconds,
        "completion_tokens": sum(r["completion_tokens"] for r in out_rows),
        "prompt_tokens": sum(r["prompt_tokens"] for r in out_rows),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_gpu_mib": gpu.peak,
        "outputs": [
            [r["qid"], r["prompt"], r["raw"], r["decision"], r["answer"]] for r in out_rows
        ],
    }


def child(args: argparse.Namespace, batch: int, flash_attn: bool) -> dict:
    command = [
        sys.executable,
        __file__,
        "--one",
        str(batch),
        "--model",
        str(args.model),
        "--questions",
        str(args.questions),
        "--threads",
        str(args.threads),
        "--n-gpu-layers",
        str(args.n_gpu_layers),
        "--max-tokens",
        str(args.max_tokens),
        "--context-tokens",
        str(args.context_tokens),
        "--n-ctx",
        str(args.n_ctx),
    ] + (["--flash-attn"] if flash_attn else [])
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"batch {batch} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def agreement(result: dict, reference: dict) -> tuple[float, float]:
    from grabrag.core.text import normalize_answer

    def key(o: list) -> tuple:
        return (o[3], normalize_answer(o[4] or ""))

    pairs = list(zip(result["outputs"], reference["outputs"], strict=True))
    decided = sum(key(a) == key(b) for a, b in pairs) / len(pairs)
    raw = sum(a[2] == b[2] for a, b in pairs) / len(pairs)
    return decided, raw


def report(result: dict, base: dict) -> str:
    calls_s = result["calls"] / result["seconds"]
    ratio = calls_s / (base["calls"] / base["seconds"])
    decided, raw = agreement(result, base)
    gpu = f", GPU {result['peak_gpu_mib']} MiB" if result["peak_gpu_mib"] is not None else ""
    return (
        f"batch {result['batch']:>2}{' fa' if result['flash_attn'] else '   '}: "
        f"{result['seconds']:7.1f} s, {calls_s:6.3f} calls/s ({ratio:5.2f}x), "
        f"{result['completion_tokens'] / result['seconds']:7.1f} gen tok/s, "
        f"RSS {result['peak_rss_mb']:.0f} MB{gpu}; agrees with batch 1: "
        f"decision+answer {decided:.0%}, raw {raw:.0%}"
    )


# --- a random-weight model of a given shape -------------------------------------------------------


def build_random_model(source: Path, target: Path, shape: dict, quantize: bool) -> Path:
    """A llama of ``shape`` with random F16 weights and ``source``'s tokenizer and chat
    template, quantised to Q4_K_M by llama.cpp (``quantize``)."""
    import gguf
    import numpy as np

    from tests.micro_model import _field

    reader = gguf.GGUFReader(str(source))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    vocab = len(tokens)
    n_embd, n_head, n_head_kv = shape["n_embd"], shape["n_head"], shape["n_head_kv"]
    head_dim = n_embd // n_head
    f16 = target.with_suffix(".f16.gguf")
    writer = gguf.GGUFWriter(str(f16), "llama")
    writer.add_name("grabrag benchmark model (random weights)")
    writer.add_context_length(8192)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(shape["n_layer"])
    writer.add_feed_forward_length(shape["n_ff"])
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    for key, add in (
        ("tokenizer.ggml.model", writer.add_tokenizer_model),
        ("tokenizer.ggml.pre", writer.add_tokenizer_pre),
        ("tokenizer.ggml.token_type", writer.add_token_types),
        ("tokenizer.ggml.merges", writer.add_token_merges),
        ("tokenizer.ggml.bos_token_id", writer.add_bos_token_id),
        ("tokenizer.ggml.eos_token_id", writer.add_eos_token_id),
        ("tokenizer.chat_template", writer.add_chat_template),
    ):
        add(_field(reader, key))
    writer.add_token_list(tokens)
    rng = np.random.default_rng(0)

    def weight(*dims: int) -> np.ndarray:
        return (0.02 * rng.standard_normal(dims, dtype=np.float32)).astype(np.float16)

    writer.add_tensor("token_embd.weight", weight(vocab, n_embd))
    for layer in range(shape["n_layer"]):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"{block}.attn_q.weight", weight(n_embd, n_embd))
        writer.add_tensor(f"{block}.attn_k.weight", weight(n_head_kv * head_dim, n_embd))
        writer.add_tensor(f"{block}.attn_v.weight", weight(n_head_kv * head_dim, n_embd))
        writer.add_tensor(f"{block}.attn_output.weight", weight(n_embd, n_embd))
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"{block}.ffn_gate.weight", weight(shape["n_ff"], n_embd))
        writer.add_tensor(f"{block}.ffn_up.weight", weight(shape["n_ff"], n_embd))
        writer.add_tensor(f"{block}.ffn_down.weight", weight(n_embd, shape["n_ff"]))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", weight(vocab, n_embd))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    if not quantize:
        f16.replace(target)
        return target
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_M
    params.nthread = os.cpu_count() or 1
    status = llama_cpp.llama_model_quantize(
        str(f16).encode(), str(target).encode(), llama_cpp.byref(params)
    )
    f16.unlink()
    if status != 0:
        raise SystemExit(f"llama_model_quantize failed with status {status}")
    return target


def micro_model() -> Path:
    from grabrag.data.assets import resolve
    from tests.micro_model import build_micro_gguf

    target = Path(tempfile.gettempdir()) / "grabrag-bench-micro.gguf"
    if not target.exists():
        build_micro_gguf(resolve(REAL_MODEL), target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="GGUF model (default: the 135M model)")
    parser.add_argument("--batches", default="2,4,8,16,32")
    parser.add_argument("--questions", type=int, default=16, help="questions (x3 prompts)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--n-gpu-layers", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--context-tokens", type=int, default=1500)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--flash-attn", action="store_true", help="flash attention on")
    parser.add_argument("--quick", action="store_true", help="the micro model, < 1 minute")
    parser.add_argument("--gpu", action="store_true", help="build an 8B-shaped model, GPU")
    parser.add_argument("--shape", choices=("llama-3.1-8b", "small"), default="llama-3.1-8b")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one is not None:
        print(json.dumps(run_one(args)))
        return
    from grabrag.data.assets import resolve

    if not REAL_MODEL.exists() or not SQUAD.exists():
        raise SystemExit("run the main job first (`snakemake`): it fetches the model and SQuAD")
    flash = [args.flash_attn]
    if args.quick:
        args.model = micro_model()
        args.questions, args.batches = 6, "6"
    elif args.gpu:
        target = Path(tempfile.gettempdir()) / f"grabrag-bench-{args.shape}-q4_k_m.gguf"
        if not target.exists():
            started = time.perf_counter()
            shape = LLAMA_8B if args.shape == "llama-3.1-8b" else SMALL
            build_random_model(resolve(REAL_MODEL), target, shape, quantize=True)
            print(
                f"built {target} ({target.stat().st_size / 2**30:.1f} GiB) in "
                f"{time.perf_counter() - started:.0f} s",
                flush=True,
            )
        args.model, args.n_gpu_layers = target, -1
        flash = [False, True]
    elif args.model is None:
        args.model = resolve(REAL_MODEL)
    batches = [int(b) for b in args.batches.split(",")]
    print(
        f"{args.model.name}: {args.questions} questions x {len(PROMPTS)} prompts, "
        f"max_tokens {args.max_tokens}, context cap {args.context_tokens} tokens, "
        f"{args.threads} threads, n_gpu_layers {args.n_gpu_layers}, "
        f"load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    best: tuple[float, dict, dict] | None = None
    for fa in flash:
        base = child(args, 1, fa)
        print(report(base, base), flush=True)
        for batch in batches:
            result = child(args, batch, fa)
            print(report(result, base), flush=True)
            ratio = (result["calls"] / result["seconds"]) / (base["calls"] / base["seconds"])
            if best is None or ratio > best[0]:
                best = (ratio, result, base)
    if args.quick and best is not None:
        ratio, result, _ = best
        again = child(args, result["batch"], result["flash_attn"])
        identical = "yes" if again["outputs"] == result["outputs"] else "no"
        print(
            f"batch {result['batch']}: {ratio:.2f}x calls/s vs batch 1, "
            f"outputs identical to a rerun: {identical}"
        )


if __name__ == "__main__":
    main()
