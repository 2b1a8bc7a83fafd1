"""Generation speed (issue: LLM generation), measured side by side in one process.

1. Prefix reuse: P0, P1 and P2 of a question back to back (what a generation job does)
   versus three separate passes over the questions, one per prompt. Target: >= 1.5x.
2. Harness overhead: ``run_cells`` (prompt building, parsing, checkpointing, progress)
   versus a bare llama-cpp-python loop over the same messages in the same order.
   Target: throughput >= 0.95x the bare loop.

Both use the embedded SmolLM2-135M GGUF on the Q50 contexts of the embedded default
(run `snakemake` first). Usage: python benchmarks/bench_generation.py [--questions 5]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from grabrag.assets import resolve
from grabrag.generation import GenerationSettings, LlamaGenerator, run_cells
from grabrag.io import read_jsonl
from grabrag.prompts import CONTEXT_PROMPTS, messages_for

REPO = Path(__file__).resolve().parents[1]


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=5)
    parser.add_argument("--dataset", default="squad")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    rows = read_jsonl(REPO / f"results/contexts/{args.dataset}/Q50.jsonl")[: args.questions]
    model = resolve(REPO / "resources/smollm2-135m-instruct-q4_1/manifest.json")
    generator = LlamaGenerator(model, GenerationSettings(), n_threads=args.threads)
    calls = [(r, p) for r in rows for p in CONTEXT_PROMPTS]
    print(
        f"{len(rows)} questions x {len(CONTEXT_PROMPTS)} prompts, {args.threads} threads, "
        f"load average {os.getloadavg()[0]:.2f}"
    )

    def back_to_back() -> None:
        for row in rows:
            generator.reset()
            for prompt in CONTEXT_PROMPTS:
                generator.complete(messages_for(prompt, row["question"], row["context"]))

    def separate_passes() -> None:
        for prompt in CONTEXT_PROMPTS:
            for row in rows:
                generator.complete(messages_for(prompt, row["question"], row["context"]))

    def bare_question(row) -> None:
        llm = generator.llm
        llm.reset()
        for prompt in CONTEXT_PROMPTS:
            llm.create_chat_completion(
                messages=messages_for(prompt, row["question"], row["context"]),
                grammar=generator.grammar,
                temperature=0.0,
                max_tokens=512,
                seed=42,
            )

    def harness_question(row, checkpoint: Path) -> None:
        run_cells(generator.complete, generator.reset, [row], list(CONTEXT_PROMPTS), checkpoint)

    def bare_vs_harness() -> tuple[float, float]:
        """Question by question, alternating which goes first, so a load spike from
        elsewhere hits both sides alike (a long bare run then a long harness run did not)."""
        bare = ours = 0.0
        with tempfile.TemporaryDirectory() as tmp:
            for i, row in enumerate(rows):
                checkpoint = Path(tmp) / f"checkpoint-{i}.jsonl"
                first_bare = i % 2 == 0
                if first_bare:
                    bare += timed(lambda r=row: bare_question(r))
                ours += timed(lambda r=row, c=checkpoint: harness_question(r, c))
                if not first_bare:
                    bare += timed(lambda r=row: bare_question(r))
        return bare, ours

    timed(lambda: generator.complete(messages_for("P0", "warm up?", "[1] warm up")))
    separate = timed(separate_passes)
    grouped = timed(back_to_back)
    bare, ours = bare_vs_harness()
    print(
        f"prefix reuse: separate passes {separate:.1f} s, back to back {grouped:.1f} s, "
        f"speed-up {separate / grouped:.2f}x (target >= 1.5x)"
    )
    print(
        f"harness: bare loop {bare:.1f} s, run_cells {ours:.1f} s, "
        f"throughput ratio {bare / ours:.3f} (target >= 0.95) over {len(calls)} calls"
    )


if __name__ == "__main__":
    main()
