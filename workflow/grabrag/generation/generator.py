"""Grammar-constrained generation with llama-cpp-python (GRAB-RAG section 3.1, Appendix B).

One job loads the model once and writes the cells of one model x dataset x condition:
P0, P1 and P2 run back to back for each question, so llama.cpp reuses the KV cache of
their shared prefix (system message + context + question). Every finished call is
appended to a checkpoint file; a killed job resumes from it and redoes at most the
question in flight. The KV cache is reset at the start of each question, so a resumed
run computes exactly what an uninterrupted one does.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from grabrag.core.decisions import DECISIONS
from grabrag.core.errors import GrabragError
from grabrag.core.io import append_checkpoint_row, read_checkpoint_rows
from grabrag.core.parsing import PARSE_FAILED, PARSE_OK, PARSE_REPAIRED
from grabrag.core.progress import Progress
from grabrag.generation.batching import BatchedDecoder, Batcher, run_in_groups
from grabrag.generation.greedy_grammar import install as install_argmax_first_grammar
from grabrag.generation.prompts import GBNF_GRAMMAR, messages_for

# A process that loads a GGUF model imports llama_cpp before numpy and torch. On a CUDA
# machine (an H200 with torch 2.11+cu130 and numpy 2.5 with its OpenBLAS), loading
# llama.cpp's CUDA backend after either of them crashed with a segmentation fault at
# model load; with llama_cpp imported first the same run worked. The model-calling rule
# scripts (and benchmarks/bench_gpu.py) import it right after their path setup, and a
# test keeps them that way.
LLAMA_FIRST = "import llama_cpp before numpy and torch in a process that loads a model"
MODEL_SCRIPTS = (
    "generate",
    "nli",
    "evidential_evaluate",
    "evidential_generate",
    "cdd_generate",
    "cdd_baselines",
)
# Closing sequences tried, in order, on an output cut off by max_tokens. They only ever
# complete the last field (reasoning), so decision, answer and confidence must all have
# been generated: a cut before that stays "failed" instead of getting invented values.
_REPAIR_SUFFIXES = ('"}', "}", '""}', ' ""}', '": ""}', '"reasoning": ""}')
# Chat templates add a few tokens around the messages; the preflight adds this margin.
CHAT_TEMPLATE_MARGIN = 48


class GenerationError(GrabragError):
    """The model or its settings cannot serve the prompts (raised before any work)."""


CUDA_BUILD = (
    'CMAKE_ARGS="-DGGML_CUDA=on" pip install --no-cache-dir --force-reinstall --no-deps '
    "llama-cpp-python==0.3.36"
)


def check_gpu_offload(n_gpu_layers: int, allow_cpu: bool, supports_gpu: bool) -> str | None:
    """Refuse a model configured for GPU offload on a llama.cpp build that has no GPU
    backend: it would silently run every layer on the CPU (days instead of hours for the
    paper's setting). ``allow_cpu`` accepts that explicitly; the warning is returned."""
    if n_gpu_layers == 0 or supports_gpu:
        return None
    message = (
        f"the model is configured for GPU offload (n_gpu_layers: {n_gpu_layers}) but this "
        "llama-cpp-python build has no GPU support (pip's default wheel is CPU-only), so "
        "every layer would run on the CPU"
    )
    if allow_cpu:
        return message + "; running on the CPU because the model sets allow_cpu: true"
    raise GenerationError(
        f"{message}. Install the CUDA build (pip must not reuse its cached CPU wheel): "
        f"{CUDA_BUILD}; or set n_gpu_layers: 0 (or allow_cpu: true) for this model to run "
        "on the CPU on purpose"
    )


def device_line(n_gpu_layers: int, supports_gpu: bool, n_threads: int) -> str:
    """Where a loaded model runs, for the job's log: the CPU, or the GPU(s) this job
    claimed (CUDA_VISIBLE_DEVICES, grabrag.core.devices) with the layers offloaded."""
    plural = "" if n_threads == 1 else "s"
    if n_gpu_layers != 0 and supports_gpu:
        devices = os.environ.get("CUDA_VISIBLE_DEVICES") or "every visible GPU"
        layers = "all layers" if n_gpu_layers < 0 else f"{n_gpu_layers} layers"
        return f"on GPU {devices}: {layers} offloaded, {n_threads} CPU thread{plural}"
    why = "n_gpu_layers: 0" if n_gpu_layers == 0 else "this llama.cpp build has no GPU backend"
    return f"on the CPU ({why}), {n_threads} thread{plural}"


def _llama_cpp_reason(model_path: Path, n_gpu_layers: int) -> str:
    """llama.cpp's own reason for refusing a model file: the load again, verbose, with
    its C-level stderr captured (llama-cpp-python only raises "Failed to load")."""
    import llama_cpp

    # llama-cpp-python's log callback writes to sys.stderr, llama.cpp's own C code to fd 2
    said = io.StringIO()
    with tempfile.TemporaryFile() as captured, contextlib.redirect_stderr(said):
        saved = os.dup(2)
        os.dup2(captured.fileno(), 2)
        try:
            llama_cpp.Llama(model_path=str(model_path), n_gpu_layers=n_gpu_layers, verbose=True)
        except (ValueError, RuntimeError):
            pass
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        text = said.getvalue() + captured.read().decode("utf-8", "replace")
    # the first specific line: "... data is not within the file bounds, model is corrupted
    # or incomplete", "failed to read key-value pairs"; then the general "error loading"
    found = re.findall(r"(?:failed to read [^\n]+|not within the file bounds[^\n]*)", text)
    found += re.findall(r"error loading model: (.+)", text)
    return found[0].strip() if found else ""


def load_failure(model_path: Path, n_gpu_layers: int, error: Exception) -> str:
    """What to tell a user whose model file llama.cpp refused, and what to do: a file cut
    short (a download or copy interrupted) is named truncated, with how to fetch it again."""
    reason = _llama_cpp_reason(model_path, n_gpu_layers)
    size = model_path.stat().st_size
    if any(sign in reason for sign in ("file bounds", "incomplete", "failed to read")):
        if model_path.parent.name == "files":  # an asset the workflow fetched
            again = (
                f"Delete {model_path.parent.parent} and run snakemake again to fetch it "
                "(a pinned sha256 is checked when it arrives)"
            )
        else:
            again = "Copy it again from where it came from (its asset is a local path)"
        return (
            f"model file {model_path} is truncated ({size:,} bytes; llama.cpp: {reason}): a "
            f"download or copy was cut short. {again}"
        )
    return f"llama.cpp could not load {model_path} ({size:,} bytes): {reason or error}"


@dataclass
class GenerationSettings:
    n_ctx: int = 4096
    max_tokens: int = 512
    temperature: float = 0.0
    seed: int = 42


@dataclass
class Parsed:
    status: str
    decision: str | None
    answer: str | None
    confidence: int | None
    reasoning: str | None


def _validate(obj: Any) -> Parsed | None:
    if not isinstance(obj, dict):
        return None
    decision, answer = obj.get("decision"), obj.get("answer")
    confidence, reasoning = obj.get("confidence"), obj.get("reasoning")
    if decision not in DECISIONS or not isinstance(answer, str):
        return None
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, int)
        or not 0 <= confidence <= 100
    ):
        return None
    if not isinstance(reasoning, str):
        return None
    return Parsed(PARSE_OK, decision, answer, confidence, reasoning)


def _loads(text: str) -> Any:
    # strict=False: the paper's grammar lets a string hold a raw newline or tab, which
    # strict JSON rejects; output the grammar allows is never a format failure (the
    # paper: "formatting failures cannot be mistaken for reasoning failures").
    return json.loads(text, strict=False)


def parse_output(raw: str, finish_reason: str | None) -> Parsed:
    """Parse the model's JSON; repair an output cut off by max_tokens where possible."""
    try:
        parsed = _validate(_loads(raw))
    except json.JSONDecodeError:
        parsed = None
    if parsed is not None:
        return parsed
    if finish_reason == "length":
        for suffix in _REPAIR_SUFFIXES:
            try:
                repaired = _validate(_loads(raw + suffix))
            except json.JSONDecodeError:
                continue
            if repaired is not None:
                repaired.status = PARSE_REPAIRED
                return repaired
    return Parsed(PARSE_FAILED, None, None, None, None)


class LlamaGenerator:
    """One loaded GGUF model; greedy, grammar-constrained chat completions."""

    @classmethod
    def for_model(
        cls,
        model_path: str | Path,
        settings: GenerationSettings,
        model: Mapping[str, Any],
        n_threads: int,
    ) -> LlamaGenerator:
        """A generator for one configured model: its ``models.<name>`` entry says how many
        layers go to the GPU, whether running on the CPU is allowed, and the chat format."""
        return cls(
            model_path,
            settings,
            n_threads=n_threads,
            n_gpu_layers=model["n_gpu_layers"],
            allow_cpu=model["allow_cpu"],
            chat_format=model["chat_format"],
            batch=model.get("batch", 1),
        )

    def __init__(
        self,
        model_path: str | Path,
        settings: GenerationSettings,
        n_threads: int,
        n_gpu_layers: int = 0,
        chat_format: str | None = None,
        allow_cpu: bool = False,
        batch: int = 1,
        flash_attn: bool = False,
    ) -> None:
        import llama_cpp
        from llama_cpp import llama_chat_format

        supports_gpu = bool(llama_cpp.llama_supports_gpu_offload())
        warning = check_gpu_offload(n_gpu_layers, allow_cpu, supports_gpu)
        if warning:
            logging.getLogger("grabrag").warning("%s", warning)
        self.settings = settings
        if batch > 1 and settings.temperature != 0:
            raise GenerationError(
                f"batch: {batch} decodes greedily, but generation.temperature is "
                f"{settings.temperature}; set the model's batch to 1 to sample"
            )
        self.batch = batch
        model_path = Path(model_path)
        if not model_path.is_file():
            raise GenerationError(f"model file {model_path} does not exist")
        with model_path.open("rb") as handle:
            if handle.read(4) != b"GGUF":
                raise GenerationError(
                    f"{model_path} is not a GGUF file (bad magic bytes); the download is "
                    "corrupt or the asset points at the wrong file"
                )
        if chat_format is not None:
            known = llama_chat_format.LlamaChatCompletionHandlerRegistry()._chat_handlers
            if chat_format not in known:
                raise GenerationError(
                    f"unknown chat format {chat_format!r} in the model's config; use null for "
                    f"the model's own template or one of: {', '.join(sorted(known))}"
                )
        try:
            self.llm = llama_cpp.Llama(
                model_path=str(model_path),
                n_ctx=settings.n_ctx,
                n_threads=n_threads,
                n_threads_batch=n_threads,
                n_gpu_layers=n_gpu_layers,
                seed=settings.seed,
                chat_format=chat_format,
                flash_attn=flash_attn,
                verbose=False,
            )
        except (ValueError, RuntimeError) as error:
            raise GenerationError(load_failure(model_path, n_gpu_layers, error)) from None
        logging.getLogger("grabrag").info(
            "model %s %s", model_path.name, device_line(n_gpu_layers, supports_gpu, n_threads)
        )
        # Greedy + grammar without filtering the whole vocabulary at every token (same
        # tokens; see grabrag.generation.greedy_grammar).
        install_argmax_first_grammar(self.llm)
        self.grammar = llama_cpp.LlamaGrammar.from_string(GBNF_GRAMMAR, verbose=False)
        # Other passes (EvidentialRAG's evaluator, CDD's steps) bring their own grammar;
        # each is compiled once per job.
        self._grammars = {GBNF_GRAMMAR: self.grammar}
        # batch > 1: the per-question code of a job runs in groups of units whose calls are
        # decoded together (grabrag.generation.batching); complete() routes a unit's call there.
        self.batcher: Batcher[Any, Any] | None = None
        if batch > 1:
            self.decoder = BatchedDecoder(self.llm, batch, settings.n_ctx, n_threads)
            self.batcher = Batcher(
                batch, self.decoder.complete_many, GBNF_GRAMMAR, settings.max_tokens
            )

    def prompt_tokens(self, messages: Sequence[dict[str, str]]) -> int:
        text = "\n".join(m["content"] for m in messages)
        return len(self.llm.tokenize(text.encode("utf-8"), add_bos=True)) + CHAT_TEMPLATE_MARGIN

    def preflight(self, calls: Iterable[tuple[str, list[dict[str, str]]]]) -> None:
        """Fail before any work when a prompt + max_tokens cannot fit the context window."""
        budget = self.settings.n_ctx - self.settings.max_tokens
        for label, messages in calls:
            needed = self.prompt_tokens(messages)
            if needed > budget:
                raise GenerationError(
                    f"{label}: the prompt needs about {needed} tokens but n_ctx "
                    f"{self.settings.n_ctx} - max_tokens {self.settings.max_tokens} leaves "
                    f"{budget}; raise generation.n_ctx or lower contexts.max_context_tokens"
                )

    def reset(self) -> None:
        self.llm.reset()

    def grammar_for(self, gbnf: str) -> Any:
        """The compiled LlamaGrammar of a GBNF string (cached)."""
        if gbnf not in self._grammars:
            import llama_cpp

            self._grammars[gbnf] = llama_cpp.LlamaGrammar.from_string(gbnf, verbose=False)
        return self._grammars[gbnf]

    def complete(
        self,
        messages: list[dict[str, str]],
        grammar: str | None = None,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        """One greedy chat completion. ``grammar``: a GBNF string (default: the paper's
        answer grammar); ``max_tokens``: default the configured generation.max_tokens.
        Called from a unit of :attr:`batcher`'s running group, the call joins that group's
        round instead."""
        if self.batcher is not None and self.batcher.active():
            return self.batcher.complete(messages, grammar, max_tokens)
        started = time.perf_counter()
        response = self.llm.create_chat_completion(
            messages=messages,
            grammar=self.grammar if grammar is None else self.grammar_for(grammar),
            temperature=self.settings.temperature,
            max_tokens=self.settings.max_tokens if max_tokens is None else max_tokens,
            seed=self.settings.seed,
        )
        choice = response["choices"][0]
        return {
            "raw": choice["message"]["content"] or "",
            "finish_reason": choice.get("finish_reason"),
            "prompt_tokens": response["usage"]["prompt_tokens"],
            "completion_tokens": response["usage"]["completion_tokens"],
            "seconds": round(time.perf_counter() - started, 3),
        }


Completer = Callable[[list[dict[str, str]]], dict[str, Any]]
# messages(prompt, question, context) -> chat messages (default: the paper's prompts).
MessageBuilder = Callable[[str, str, str], list[dict[str, str]]]


def generation_row(
    context_row: dict[str, Any], prompt: str, result: dict[str, Any], batch: int = 1
) -> dict[str, Any]:
    """One call's row; ``batch`` is the model's batch setting the call was decoded under."""
    parsed = parse_output(result["raw"], result["finish_reason"])
    return {
        "qid": context_row["qid"],
        "index": context_row["index"],
        "condition": context_row["condition"],
        "prompt": prompt,
        "decision": parsed.decision,
        "answer": parsed.answer,
        "confidence": parsed.confidence,
        "reasoning": parsed.reasoning,
        "parse_status": parsed.status,
        "raw": result["raw"],
        "finish_reason": result["finish_reason"],
        "prompt_tokens": result["prompt_tokens"],
        "completion_tokens": result["completion_tokens"],
        "seconds": result["seconds"],
        "batch": batch,
        **provenance(result),
    }


def provenance(result: Mapping[str, Any]) -> dict[str, Any]:
    """A served model's call says how it was made (``served``: backend, host, the model
    name the server reports, constraint dialect, cache hit); an in-process call adds
    nothing, so its rows are as before."""
    return {"served": result["served"]} if "served" in result else {}


def read_checkpoint(path: Path, batch: int = 1) -> dict[tuple[str, str], dict[str, Any]]:
    """Finished calls from a checkpoint, by (qid, prompt); a torn last line (killed
    mid-write) is ignored, and so are rows decoded under another batch size."""
    return read_checkpoint_rows(  # type: ignore[return-value]
        path, ("qid", "prompt"), keep=lambda row: row.get("batch", 1) == batch
    )


def run_cells(
    complete: Completer,
    reset: Callable[[], None],
    context_rows: Sequence[dict[str, Any]],
    prompts: Sequence[str],
    checkpoint: Path,
    progress: Progress | None = None,
    messages: MessageBuilder = messages_for,
    batcher: Batcher[Any, Any] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Generate every (question, prompt) call, resuming from ``checkpoint``.

    Prompts of one question run back to back (shared prefix); rows come back per
    prompt in question order. The checkpoint is left in place; the caller removes it
    once the cells are written. ``messages`` builds a prompt's chat messages (default
    the paper's P0-P2/CB prompts; CDD's baselines pass
    :func:`grabrag.cdd.baselines.baseline_messages`); outputs are parsed with
    :func:`parse_output`.
    With a ``batcher`` (the model's batch > 1), the calls of ``batcher.size //
    len(prompts)`` questions (at least one) are decoded together, so the prompts of a
    question share their prefix; a group not finished when the job was killed is redone
    whole.
    """
    batch = batcher.size if batcher else 1
    done = read_checkpoint(checkpoint, batch)
    checkpoint.parent.mkdir(parents=True, exist_ok=True)
    with checkpoint.open("a", encoding="utf-8") as handle:

        def finished(row: dict[str, Any], prompt: str, out: dict[str, Any]) -> None:
            done[(row["qid"], prompt)] = out
            append_checkpoint_row(handle, out)
            if progress:
                progress.step(f"{row['qid']} {prompt}")

        if batcher is not None:

            def call(unit: tuple[dict[str, Any], str]) -> dict[str, Any]:
                row, prompt = unit
                result = complete(messages(prompt, row["question"], row["context"]))
                return generation_row(row, prompt, result, batch)

            def skipped(group: Sequence[tuple[dict[str, Any], str]]) -> None:
                if progress:
                    progress.skip(f"{group[0][0]['qid']} .. {group[-1][0]['qid']}", len(group))

            run_in_groups(
                batcher,
                [(row, prompt) for row in context_rows for prompt in prompts],
                call,
                lambda unit: (unit[0]["qid"], unit[1]) in done,
                lambda group, outs: [finished(*u, o) for u, o in zip(group, outs, strict=True)],
                skipped,
                per_question=len(prompts),
            )
        for row in context_rows if batcher is None else ():
            pending = [p for p in prompts if (row["qid"], p) not in done]
            if pending and len(pending) < len(prompts):
                # A question in flight when the job was killed: redo it whole, so the
                # calls see the same KV-cache history as in an uninterrupted run.
                pending = list(prompts)
            if pending:
                reset()
            for prompt in pending:
                result = complete(messages(prompt, row["question"], row["context"]))
                finished(row, prompt, generation_row(row, prompt, result))
            if not pending and progress:
                progress.skip(f"{row['qid']} {', '.join(prompts)}", n=len(prompts))
    return {p: [done[(row["qid"], p)] for row in context_rows] for p in prompts}


def cell_report(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    statuses = Counter(r["parse_status"] for r in rows)
    return {
        "rows": len(rows),
        "parse_status": {s: statuses.get(s, 0) for s in (PARSE_OK, PARSE_REPAIRED, PARSE_FAILED)},
        "decisions": dict(Counter(str(r["decision"]) for r in rows)),
        "finish_reasons": dict(Counter(str(r["finish_reason"]) for r in rows)),
        "completion_tokens": sum(r["completion_tokens"] for r in rows),
        "seconds": round(sum(r["seconds"] for r in rows), 3),
    }


def settings_from(config: dict[str, Any]) -> GenerationSettings:
    return GenerationSettings(**{k: config[k] for k in asdict(GenerationSettings())})
