"""The endpoint backend against the in-process path: same model, same questions, one run.

    python benchmarks/bench_endpoint.py                 # the 135M model, 8 questions x P0-P2
    python benchmarks/bench_endpoint.py --questions 4 --max-tokens 128

Starts llama-cpp-python's OpenAI-compatible server (``python -m llama_cpp.server``) on the
embedded default's GGUF on a free loopback port, then runs the generation stage's own code
(``run_cells``: P0, P1 and P2 of each question under the paper's grammar) first in-process
(``LlamaGenerator``, batch 1), then through :class:`EndpointGenerator` at concurrency 1, 4
and 8, each with an empty response cache, and finally once more at concurrency 1 from the
cache. Per configuration: calls/s, the ratio to in-process, and agreement with the
in-process rows (decision and answer; raw output).

llama-cpp-python's server decodes one request at a time, so on it concurrency measures the
client's overhead, not a serving engine's batching: vLLM, SGLang or ``llama-server -np N``
batch concurrent requests, which this CPU-only machine cannot show.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "workflow"))
sys.path.insert(0, str(REPO))

import llama_cpp  # noqa: E402,F401  (before numpy: grabrag.generation.generator.LLAMA_FIRST)

from benchmarks.bench_batching import REAL_MODEL, SQUAD, squad_rows  # noqa: E402
from tests.conftest import serve  # noqa: E402  (the tests' own server start-up)

PROMPTS = ("P0", "P1", "P2")
SERVED = "bench-model"


def run(generator, rows: list[dict]) -> tuple[float, list[dict]]:
    from grabrag.generation.generator import run_cells

    checkpoint = Path(tempfile.mkdtemp()) / "checkpoint.jsonl"
    started = time.perf_counter()
    cells = run_cells(
        generator.complete, generator.reset, rows, PROMPTS, checkpoint, batcher=generator.batcher
    )
    seconds = time.perf_counter() - started
    return seconds, [row for prompt in PROMPTS for row in cells[prompt]]


def agreement(rows: list[dict], base: list[dict]) -> str:
    same = sum(
        (a["decision"], a["answer"]) == (b["decision"], b["answer"])
        for a, b in zip(rows, base, strict=True)
    )
    raw = sum(a["raw"] == b["raw"] for a, b in zip(rows, base, strict=True))
    return f"decision+answer {same}/{len(base)}, raw {raw}/{len(base)}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--context-tokens", type=int, default=1500)
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--concurrency", default="1,4,8")
    args = parser.parse_args()
    from grabrag.data.assets import resolve
    from grabrag.generation.endpoint import EndpointGenerator
    from grabrag.generation.generator import GenerationSettings, LlamaGenerator

    if not REAL_MODEL.exists() or not SQUAD.exists():
        raise SystemExit("run the main job first (`snakemake`): it fetches the model and SQuAD")
    model = resolve(REAL_MODEL)
    settings = GenerationSettings(n_ctx=args.n_ctx, max_tokens=args.max_tokens)
    in_process = LlamaGenerator(model, settings, n_threads=args.threads)
    rows = squad_rows(
        args.questions,
        args.context_tokens,
        lambda text: in_process.llm.tokenize(text.encode(), add_bos=False),
    )
    calls = len(rows) * len(PROMPTS)
    print(
        f"{model.name}: {args.questions} questions x {len(PROMPTS)} prompts, max_tokens "
        f"{args.max_tokens}, {args.threads} threads, load {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    base_seconds, base = run(in_process, rows)
    print(f"in-process      : {base_seconds:7.1f} s, {calls / base_seconds:6.3f} calls/s (1.00x)")
    in_process.llm.close()  # its memory back before the server loads the same model
    log = Path(tempfile.mkdtemp()) / "server.log"
    server, url = serve(model, log, args.threads, args.n_ctx, alias=SERVED, api_key=None)
    try:
        cache_dir = Path(tempfile.mkdtemp())
        for concurrency in [int(c) for c in args.concurrency.split(",")]:
            spec = {"base_url": url, "model": SERVED, "concurrency": concurrency}
            cache = cache_dir / f"c{concurrency}.sqlite"
            generator = EndpointGenerator("bench", spec, settings, cache_path=cache)
            seconds, served = run(generator, rows)
            print(
                f"endpoint c={concurrency:<3}: {seconds:7.1f} s, {calls / seconds:6.3f} calls/s "
                f"({base_seconds / seconds:.2f}x); {agreement(served, base)}",
                flush=True,
            )
        spec = {"base_url": url, "model": SERVED, "concurrency": 1}
        generator = EndpointGenerator("bench", spec, settings, cache_path=cache_dir / "c1.sqlite")
        seconds, served = run(generator, rows)
        hits = generator.report()["cache_hits"]
        print(
            f"cache rerun    : {seconds:7.2f} s, {hits}/{calls} from the cache; "
            f"{agreement(served, base)}"
        )
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
