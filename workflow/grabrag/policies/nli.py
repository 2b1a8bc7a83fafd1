"""The NLI verifier behind P4 (GRAB-RAG section 3.4, Appendix F "P4 Threshold").

Each passage of a question's context is a premise against the hypothesis
"The answer to {question} is {cb_answer}."; the label of a pair is the argmax over
{entailment, neutral, contradiction}, with no probability threshold.

Backends (both expose ``name`` and ``classify(pairs) -> labels``):

* :class:`TransformersNli`: a Hugging Face sequence classifier (the paper: DeBERTa-v3-large
  NLI). Labels come from the model's own ``config.id2label``, never from a fixed index.
* :class:`LlmNli`: the offline default, since no NLI model ships offline: the embedded
  GGUF model answers one of the three labels under a GBNF grammar. It demonstrates the
  pipeline; a 135M model is no NLI model, and its labels should be read that way.

:func:`nli_rows` writes one row per question of a context file::

    {"qid", "index", "condition", "hypothesis", "cb_answer", "cb_confidence",
     "labels", "pids", "verifier", "skipped_reason"}

``labels`` and ``pids`` follow the passage order. NLI runs only where P4 can reach it:
the CB pass answered with confidence >= the cutoff. Other questions get ``labels`` [],
``pids`` [], ``hypothesis`` None and a ``skipped_reason`` (``cb_abstained``,
``cb_low_confidence``, ``cb_parse_failed``), so the file covers every question.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from grabrag.core.errors import DataError, GrabragError
from grabrag.core.progress import Progress

log = logging.getLogger("grabrag")

ENTAILMENT, NEUTRAL, CONTRADICTION = "entailment", "neutral", "contradiction"
LABELS = (ENTAILMENT, NEUTRAL, CONTRADICTION)
HYPOTHESIS = "The answer to {question} is {cb_answer}."

SKIP_CB_ABSTAINED = "cb_abstained"
SKIP_CB_LOW_CONFIDENCE = "cb_low_confidence"
SKIP_CB_PARSE_FAILED = "cb_parse_failed"

# One rule per line: llama.cpp's GBNF parser does not take a rule spread over lines.
NLI_GRAMMAR = 'root ::= "entailment" | "neutral" | "contradiction"\n'

NLI_SYSTEM = (
    "You are a natural language inference classifier. You read a premise and a "
    "hypothesis and decide how they relate."
)
NLI_USER = (
    "Premise: {premise}\n\n"
    "Hypothesis: {hypothesis}\n\n"
    "If the premise shows that the hypothesis is true, answer entailment.\n"
    "If the premise shows that the hypothesis is false, answer contradiction.\n"
    "If the premise does not say either way, answer neutral.\n"
    "Answer with one word: entailment, neutral or contradiction."
)


class NliError(GrabragError):
    """The NLI model cannot serve as a verifier (labels, loading, output)."""


class Verifier(Protocol):
    name: str

    def classify(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        """One label of :data:`LABELS` per (premise, hypothesis) pair, in order."""
        ...


def hypothesis(question: str, cb_answer: str) -> str:
    return HYPOTHESIS.format(question=question, cb_answer=cb_answer)


# --- label names ----------------------------------------------------------------------

_NEGATED = re.compile(r"^(not|non|no)[\s_-]")


def canonical_label(name: str) -> str | None:
    """entailment/neutral/contradiction for a model's label name, or None."""
    lowered = str(name).strip().lower()
    if _NEGATED.match(lowered):  # "not_entailment" of two-way models is not entailment
        return None
    found = [
        label
        for label, stem in (
            (ENTAILMENT, "entail"),
            (NEUTRAL, "neutral"),
            (CONTRADICTION, "contradict"),
        )
        if stem in lowered
    ]
    return found[0] if len(found) == 1 else None


def label_map(id2label: Mapping[Any, str], model: str) -> dict[int, str]:
    """Class index -> canonical label, from a model config's ``id2label``.

    Every index must name exactly one of the three labels and each label must appear
    once; otherwise the model is no three-way NLI classifier and the error names it.
    """
    mapping: dict[int, str] = {}
    for index, name in id2label.items():
        label = canonical_label(name)
        if label is None:
            raise NliError(
                f"NLI model {model}: label {index} is {name!r}, which is not entailment, "
                f"neutral or contradiction (id2label {dict(id2label)}); use a three-way NLI "
                "model, or set id2label in its config.json"
            )
        mapping[int(index)] = label
    seen = sorted(mapping.values())
    if seen != sorted(LABELS):
        raise NliError(
            f"NLI model {model}: id2label {dict(id2label)} does not name entailment, neutral "
            "and contradiction once each; use a three-way NLI model"
        )
    return mapping


# --- transformers backend -------------------------------------------------------------


def torch_device(device: str, model_name: str) -> str:
    """``auto``: CUDA when torch sees a GPU, else the CPU. ``cuda`` where torch has no
    CUDA (a CPU build, no driver) is an error, not a silent CPU run."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise NliError(
            f"NLI model {model_name}: nli.device is {device!r} but torch "
            f"{torch.__version__} sees no CUDA GPU (a CPU build of torch, or no driver); "
            "install a CUDA build of torch, or set nli.device: cpu (or auto)"
        )
    return device


class TransformersNli:
    """A local Hugging Face sequence-classification NLI model, run in batches."""

    def __init__(
        self,
        model_dir: str | Path,
        batch_size: int = 16,
        device: str = "cpu",
        max_length: int = 512,
        name: str | None = None,
    ) -> None:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        model_dir = Path(model_dir)
        model_name = name or model_dir.name
        if not model_dir.is_dir():
            raise NliError(f"NLI model {model_name}: {model_dir} is not a folder")
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
            self.model = AutoModelForSequenceClassification.from_pretrained(
                model_dir, local_files_only=True
            )
        except (OSError, ValueError, KeyError) as error:
            raise NliError(f"NLI model {model_name}: cannot load {model_dir}: {error}") from None
        self.labels = label_map(self.model.config.id2label, model_name)
        if len(self.labels) != self.model.config.num_labels:
            raise NliError(
                f"NLI model {model_name}: id2label has {len(self.labels)} entries but the "
                f"model has {self.model.config.num_labels} outputs"
            )
        device = torch_device(device, model_name)
        self.model.to(device)
        self.model.eval()
        self.device = device
        visible = os.environ.get("CUDA_VISIBLE_DEVICES") or "every visible GPU"
        where = f"on GPU {visible} ({device})" if device.startswith("cuda") else "on the CPU"
        log.info("NLI model %s %s", model_name, where)
        self.batch_size = batch_size
        # The tokenizer's limit is often a placeholder (1e30); absolute position
        # embeddings are the real one.
        limits = [max_length, self.tokenizer.model_max_length]
        positions = getattr(self.model.config, "max_position_embeddings", None)
        if isinstance(positions, int) and positions > 0:
            limits.append(positions)
        self.max_length = min(limits)
        self.name = f"transformers:{model_name}"

    def logits(self, pairs: Sequence[tuple[str, str]]) -> list[list[float]]:
        """Raw class scores per pair, in the order given (indices as in id2label).

        Pairs are batched by length (less padding); padding does not change a pair's
        scores, so the order is only a speed matter."""
        import torch

        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        scores: list[list[float]] = [[] for _ in pairs]
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                chosen = order[start : start + self.batch_size]
                encoded = self.tokenizer(
                    [pairs[i][0] for i in chosen],
                    [pairs[i][1] for i in chosen],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                logits = self.model(**encoded).logits.float().cpu().tolist()
                for i, row in zip(chosen, logits, strict=True):
                    scores[i] = row
        return scores

    def classify(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        return [
            self.labels[max(range(len(scores)), key=scores.__getitem__)]
            for scores in self.logits(pairs)
        ]


# --- GGUF backend ---------------------------------------------------------------------


def nli_messages(premise: str, hypothesis_text: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": NLI_SYSTEM},
        {"role": "user", "content": NLI_USER.format(premise=premise, hypothesis=hypothesis_text)},
    ]


class LlmNli:
    """A loaded :class:`grabrag.generation.generator.LlamaGenerator` that answers one NLI label
    per pair under a three-label grammar (greedy, the generator's seed). The KV cache
    is reset before every pair, so a label never depends on which pair came before."""

    def __init__(self, generator: Any, name: str | None = None, max_tokens: int = 16) -> None:
        self.generator = generator
        self.max_tokens = max_tokens
        llm = getattr(generator, "llm", None)
        model_name = name or Path(getattr(llm, "model_path", "gguf")).name
        self.name = f"llm:{model_name}"

    def classify(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        batcher = self.generator.batcher
        if batcher is not None:
            # The model's batch > 1: pairs decoded batcher.size at a time, in order.
            labels = []
            for group in batcher.groups(pairs):
                labels += batcher.run(group, self._label_one)
            return labels
        labels = []
        for pair in pairs:
            self.generator.reset()
            labels.append(self._label_one(pair))
        return labels

    def _label_one(self, pair: tuple[str, str]) -> str:
        result = self.generator.complete(
            nli_messages(*pair), grammar=NLI_GRAMMAR, max_tokens=self.max_tokens
        )
        raw = result["raw"].strip()
        if raw not in LABELS:
            raise NliError(
                f"NLI model {self.name}: output {raw!r} is not one of {', '.join(LABELS)} "
                f"(finish reason {result['finish_reason']!r})"
            )
        return raw


# --- rows -----------------------------------------------------------------------------


def _skip_reason(cb: Mapping[str, Any], cutoff: float) -> str | None:
    if cb.get("decision") is None or cb.get("parse_status") == "failed":
        return SKIP_CB_PARSE_FAILED
    if cb["decision"] != "answer":
        return SKIP_CB_ABSTAINED
    if cb["confidence"] < cutoff:
        return SKIP_CB_LOW_CONFIDENCE
    return None


def nli_rows(
    context_rows: Sequence[Mapping[str, Any]],
    cb_rows: Sequence[Mapping[str, Any]],
    verifier: Verifier,
    cutoff: float = 50,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One NLI row per context row (same order); all pairs go to the verifier in one
    call, so its batches span questions. Every question needs a CB row (matched by qid)."""
    cb_by_qid: dict[str, Mapping[str, Any]] = {}
    for row in cb_rows:
        if row.get("prompt", "CB") != "CB":
            raise DataError(
                f"closed-book (CB) rows: qid {row['qid']} comes from prompt {row['prompt']!r}; "
                "the NLI rule was given the wrong generation file"
            )
        if row["qid"] in cb_by_qid:
            raise DataError(f"closed-book (CB) rows: qid {row['qid']} appears more than once")
        cb_by_qid[row["qid"]] = row
    missing = [r["qid"] for r in context_rows if r["qid"] not in cb_by_qid]
    if missing:
        shown = ", ".join(missing[:5]) + (", ..." if len(missing) > 5 else "")
        raise DataError(
            f"no closed-book (CB) row for qid {shown} ({len(missing)} of {len(context_rows)} "
            "questions); the CB file does not match the context file, rerun generation"
        )

    rows: list[dict[str, Any]] = []
    pairs: list[tuple[str, str]] = []
    spans: list[tuple[int, int, int]] = []  # (row position, first pair, pair count)
    for context in context_rows:
        cb = cb_by_qid[context["qid"]]
        reason = _skip_reason(cb, cutoff)
        row: dict[str, Any] = {
            "qid": context["qid"],
            "index": context.get("index"),
            "condition": context.get("condition"),
            "hypothesis": None,
            "cb_answer": cb.get("answer"),
            "cb_confidence": cb.get("confidence"),
            "labels": [],
            "pids": [],
            "verifier": verifier.name,
            "batch": getattr(verifier, "batch", 1),
            "skipped_reason": reason,
        }
        if reason is None:
            passages = context.get("passages")
            if not isinstance(passages, list):
                raise DataError(f"context row for qid {context['qid']}: no 'passages' list")
            text = hypothesis(context["question"], cb["answer"])
            row["hypothesis"] = text
            row["pids"] = [p.get("pid") for p in passages]
            spans.append((len(rows), len(pairs), len(passages)))
            pairs.extend((p["text"], text) for p in passages)
        rows.append(row)

    if progress:
        progress(
            f"NLI ({verifier.name}): {len(pairs)} pairs for {len(spans)} of {len(rows)} "
            "questions (the others' CB pass did not answer confidently)"
        )
    started = time.perf_counter()
    labels: list[str] = []
    # In chunks, for progress lines; a chunk is whole batches of the transformers backend,
    # so its batches are the same as in one call.
    chunk = 8 * getattr(verifier, "batch_size", 8)
    tracker = Progress(len(pairs), progress, unit="pairs", min_interval=10.0) if progress else None
    for start in range(0, len(pairs), chunk):
        part = pairs[start : start + chunk]
        labels.extend(verifier.classify(part))
        if tracker:
            tracker.step("NLI", n=len(part))
    if len(labels) != len(pairs):
        raise NliError(f"{verifier.name} returned {len(labels)} labels for {len(pairs)} pairs")
    for position, first, count in spans:
        rows[position]["labels"] = list(labels[first : first + count])
    if progress and pairs:
        progress(f"NLI done: {len(pairs)} pairs in {time.perf_counter() - started:.1f} s")
    return rows


def nli_report(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts for a rule log: questions run or skipped (by reason) and labels."""
    skipped: dict[str, int] = {}
    counts = dict.fromkeys(LABELS, 0)
    for row in rows:
        if row["skipped_reason"]:
            skipped[row["skipped_reason"]] = skipped.get(row["skipped_reason"], 0) + 1
        for label in row["labels"]:
            counts[label] += 1
    return {
        "questions": len(rows),
        "verified": sum(not r["skipped_reason"] for r in rows),
        "skipped": skipped,
        "labels": counts,
        "with_contradiction": sum(CONTRADICTION in r["labels"] for r in rows),
    }


class LazyVerifier:
    """A verifier whose model loads at its first ``classify`` call: a cell in which no
    closed-book answer is confident has no pairs, and its job loads no model (for the
    paper's DeBERTa-v3-large that is most of such a job's time)."""

    def __init__(
        self, name: str, batch_size: int, load: Callable[[], Verifier], batch: int = 1
    ) -> None:
        self.name = name
        self.batch_size = batch_size
        # The LLM backend's decoding batch (its model's batch setting), recorded in the rows.
        self.batch = batch
        self._load = load
        self._verifier: Verifier | None = None

    def classify(self, pairs: Sequence[tuple[str, str]]) -> list[str]:
        if self._verifier is None:
            self._verifier = self._load()
            if self._verifier.name != self.name:
                raise NliError(f"the verifier loaded as {self._verifier.name}, not {self.name}")
        return self._verifier.classify(pairs)


def lazy_verifier(backend: str, model_path: str | Path | None, **settings: Any) -> LazyVerifier:
    """:func:`build_verifier`'s verifier, loaded only when it first has pairs to label."""
    if backend not in ("transformers", "llm"):
        raise NliError(f"unknown NLI backend {backend!r}; known: transformers, llm")
    name = f"{backend}:{settings.get('name') or Path(model_path).name}"
    batch_size = int(settings.get("batch_size", 16)) if backend == "transformers" else 8
    batch = int(settings.get("batch", 1)) if backend == "llm" else 1
    return LazyVerifier(
        name, batch_size, lambda: build_verifier(backend, model_path, **settings), batch
    )


def build_verifier(
    backend: str,
    model_path: str | Path | None,
    *,
    n_threads: int = 1,
    device: str = "cpu",
    batch_size: int = 16,
    n_gpu_layers: int = 0,
    chat_format: str | None = None,
    allow_cpu: bool = False,
    n_ctx: int = 4096,
    seed: int = 42,
    name: str | None = None,
    batch: int = 1,
    endpoint: Mapping[str, Any] | None = None,
    canary: Path | None = None,
    opener: Callable[[], Any] | None = None,
) -> Verifier:
    """The configured backend (``nli.backend``: "transformers" or "llm"). ``endpoint``:
    the served generator's, which the llm verifier labels through; ``canary``: its canary
    file, whose proven identity the server must still have; ``opener``: opens the
    generator of a module's backend, which the llm verifier then labels with."""
    if backend == "transformers":
        return TransformersNli(model_path, batch_size=batch_size, device=device, name=name)
    if backend == "llm" and opener is not None:
        # The generator's own model, through the backend a config module declares.
        return LlmNli(opener(), name=name)
    if backend == "llm" and endpoint:
        # The generator's own model, served: the labels come from its endpoint.
        from grabrag.generation.endpoint import EndpointGenerator
        from grabrag.generation.generator import GenerationSettings

        served = EndpointGenerator(
            name or "nli", endpoint, GenerationSettings(n_ctx=n_ctx, seed=seed), canary=canary
        )
        return LlmNli(served, name=name)
    if backend == "llm":
        from grabrag.generation.generator import GenerationSettings, LlamaGenerator

        generator = LlamaGenerator(
            model_path,
            GenerationSettings(n_ctx=n_ctx, seed=seed),
            n_threads=n_threads,
            n_gpu_layers=n_gpu_layers,
            chat_format=chat_format,
            allow_cpu=allow_cpu,
            batch=batch,
        )
        return LlmNli(generator, name=name)
    raise NliError(f"unknown NLI backend {backend!r}; known: transformers, llm")
