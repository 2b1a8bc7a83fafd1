"""Dataset adapters into the common schema, seeded sampling and the passage corpus.

Common question schema::

    {"qid", "question", "answers": [alias, ...],
     "gold_passages": [{"pid", "title", "text"}, ...], "extra": {...}}

Each adapter turns one source format into ``RawExample`` records plus extra corpus
passages (paragraphs that are not gold for any question, e.g. HotpotQA distractors).
"""

from __future__ import annotations

import hashlib
import inspect
import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grabrag.core.errors import DataError
from grabrag.core.io import read_json, read_jsonl
from grabrag.core.text import word_tokens

YES_NO = {"yes", "no"}


@dataclass
class Passage:
    title: str
    text: str

    @property
    def pid(self) -> str:
        """Content-addressed id: stable when N, the seed or the corpus cap change."""
        digest = hashlib.sha1(f"{self.title}\n{self.text}".encode()).hexdigest()
        return f"p{digest[:12]}"

    def as_dict(self) -> dict[str, str]:
        return {"pid": self.pid, "title": self.title, "text": self.text}


@dataclass
class RawExample:
    qid: str
    question: str
    answers: list[str]
    gold_passages: list[Passage]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class AdapterOutput:
    examples: list[RawExample]
    other_passages: list[Passage]
    # Rows that could not be read, each "where: why". A few defects in a large third-party
    # file are skipped and reported; more than MAX_MALFORMED_FRACTION is an error.
    malformed: list[str] = field(default_factory=list)


MAX_MALFORMED_FRACTION = 0.01


def _check_malformed(path: Path, output: AdapterOutput) -> AdapterOutput:
    total = len(output.examples) + len(output.malformed)
    if output.malformed and len(output.malformed) > MAX_MALFORMED_FRACTION * total:
        shown = "\n  ".join(output.malformed[:5])
        raise DataError(
            f"{path}: {len(output.malformed)} of {total} rows are malformed (more than "
            f"{MAX_MALFORMED_FRACTION:.0%}), so this is probably the wrong adapter or a corrupt "
            f"file. First problems:\n  {shown}"
        )
    return output


def _need(row: dict[str, Any], key: str, where: str, kind: type | tuple[type, ...]) -> Any:
    if key not in row:
        raise DataError(f"{where}: missing field '{key}'")
    value = row[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DataError(f"{where}: field '{key}' should be {names}, got {type(value).__name__}")
    return value


def _dedupe(items: Iterable[str]) -> list[str]:
    seen: dict[str, None] = {}
    for item in items:
        item = item.strip()
        if item and item not in seen:
            seen[item] = None
    return list(seen)


# --- adapters ---------------------------------------------------------------------------


def adapt_squad_v1(path: Path) -> AdapterOutput:
    """SQuAD v1.1 JSON: the question's paragraph is gold; every other paragraph joins the corpus."""
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise DataError(f"{path}: not a SQuAD v1.1 file (no top-level 'data' list)")
    examples: list[RawExample] = []
    passages: list[Passage] = []
    malformed: list[str] = []
    for a, article in enumerate(data["data"]):
        where_a = f"{path}: data[{a}]"
        title = str(_need(article, "title", where_a, str)).replace("_", " ")
        for p, paragraph in enumerate(_need(article, "paragraphs", where_a, list)):
            where_p = f"{where_a}.paragraphs[{p}]"
            passage = Passage(title, _need(paragraph, "context", where_p, str))
            passages.append(passage)
            for q, qa in enumerate(_need(paragraph, "qas", where_p, list)):
                where_q = f"{where_p}.qas[{q}]"
                try:
                    if not isinstance(qa, dict):
                        raise DataError(f"{where_q}: expected an object")
                    answers = [
                        str(_need(ans, "text", f"{where_q}.answers", str))
                        for ans in _need(qa, "answers", where_q, list)
                    ]
                    examples.append(
                        RawExample(
                            qid=str(_need(qa, "id", where_q, str)),
                            question=_need(qa, "question", where_q, str),
                            answers=_dedupe(answers),
                            gold_passages=[passage],
                        )
                    )
                except DataError as error:
                    malformed.append(str(error))
    return _check_malformed(path, AdapterOutput(examples, passages, malformed))


def _adapt_rows(
    path: Path,
    rows: Iterable[Any],
    where: Callable[[int, Any], str],
    read_row: Callable[[Any, str, list[Passage]], RawExample],
) -> AdapterOutput:
    """Apply ``read_row`` to every row, collecting malformed rows instead of stopping."""
    examples: list[RawExample] = []
    others: list[Passage] = []
    malformed: list[str] = []
    for i, row in enumerate(rows):
        location = where(i, row)
        try:
            if not isinstance(row, dict):
                raise DataError(f"{location}: expected a JSON object")
            examples.append(read_row(row, location, others))
        except DataError as error:
            malformed.append(str(error))
    return _check_malformed(path, AdapterOutput(examples, others, malformed))


def _bigbench_row(row: dict[str, Any], where: str, others: list[Passage]) -> RawExample:
    text = _need(row, "input", where, str)
    substitute = _need(row, "target", where, str)
    scores = _need(row, "target_scores", where, dict)
    originals = [k for k in scores if k != substitute]
    head, _, swapped = text.partition("\nContext:")
    if "Question:" not in head:
        raise DataError(f"{where}: 'input' is not 'Question: ...\\nContext: ...'")
    if len(originals) != 1:
        raise DataError(
            f"{where}: target_scores should hold the substitute and exactly one original "
            f"answer, got {sorted(scores)}"
        )
    swapped = swapped.strip()
    original = originals[0]
    return RawExample(
        qid=f"bbkc-{row['_index']:05d}",
        question=head.split("Question:", 1)[1].strip(),
        answers=[original],
        gold_passages=[Passage("", swapped.replace(substitute, original))],
        extra={"reference_swap": {"passage": swapped, "substitute": substitute}},
    )


def adapt_bigbench_knowledge_conflicts(path: Path) -> AdapterOutput:
    """BIG-bench contextual_parametric_knowledge_conflicts (Longpre et al. 2021 NQ swaps).

    ``input`` holds "Question: ...\\nContext: <passage with the answer swapped>", ``target``
    the substitute; the other key of ``target_scores`` is the original NQ answer. Putting
    the original back rebuilds the gold passage. The swapped passage and its substitute
    are kept under ``extra.reference_swap`` to compare against our own swaps later.
    Known defect: one example of 17,528 lists only the substitute; it is reported as
    malformed and skipped.
    """
    data = read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("examples"), list):
        raise DataError(f"{path}: not a BIG-bench task file (no 'examples' list)")
    rows = [
        {**row, "_index": i} if isinstance(row, dict) else row
        for i, row in enumerate(data["examples"])
    ]
    return _adapt_rows(path, rows, lambda i, _: f"{path}: examples[{i}]", _bigbench_row)


def _nq_open_gold_row(row: dict[str, Any], where: str, others: list[Passage]) -> RawExample:
    qid = _need(row, "example_id", where, (int, str))
    answers = _need(row, "answers", where, list)
    return RawExample(
        qid=f"nq-{qid}",
        question=_need(row, "question", where, str),
        answers=_dedupe(str(a) for a in answers),
        gold_passages=[Passage(str(row.get("title") or ""), _need(row, "text", where, str))],
    )


def adapt_hf_nq_open_gold(path: Path) -> AdapterOutput:
    """NQ-open with gold documents (hub: florin-hf/nq_open_gold), exported as JSONL rows.

    We use this variant because it is NQ's short-answer (open) subset paired with the
    original NQ gold passage already cut to retrieval-sized Wikipedia chunks; the full
    ``natural_questions`` validation set is tens of GB of HTML whose long-answer spans
    would need our own HTML-to-passage conversion. Gold documents of the other
    questions form the corpus.
    """
    return _adapt_rows(
        path, read_jsonl(path), lambda i, _: f"{path}: row {i + 1}", _nq_open_gold_row
    )


def _hotpotqa_row(row: dict[str, Any], where: str, others: list[Passage]) -> RawExample:
    context = _need(row, "context", where, dict)
    titles = _need(context, "title", f"{where}.context", list)
    sentences = _need(context, "sentences", f"{where}.context", list)
    if len(titles) != len(sentences):
        raise DataError(f"{where}: context.title and context.sentences differ in length")
    facts = _need(row, "supporting_facts", where, dict)
    support = set(_need(facts, "title", f"{where}.supporting_facts", list))
    gold: list[Passage] = []
    for title, sents in zip(titles, sentences, strict=True):
        passage = Passage(str(title), "".join(str(s) for s in sents).strip())
        (gold if title in support else others).append(passage)
    return RawExample(
        qid=str(_need(row, "id", where, str)),
        question=_need(row, "question", where, str),
        answers=_dedupe([str(_need(row, "answer", where, str))]),
        gold_passages=gold,
        extra={"type": row.get("type"), "level": row.get("level")},
    )


def adapt_hf_hotpotqa_distractor(path: Path) -> AdapterOutput:
    """HotpotQA distractor setting (hub: hotpotqa/hotpot_qa, config 'distractor').

    Paragraphs named in ``supporting_facts`` are gold; the other eight paragraphs of each
    question join the corpus as realistic same-topic distractors.
    """
    return _adapt_rows(
        path,
        read_jsonl(path),
        lambda i, row: (
            f"{path}: row {i + 1} (id {row.get('id', '?') if isinstance(row, dict) else '?'})"
        ),
        _hotpotqa_row,
    )


def _common_schema_row(row: dict[str, Any], where: str, others: list[Passage]) -> RawExample:
    gold = []
    for j, passage in enumerate(_need(row, "gold_passages", where, list)):
        if not isinstance(passage, dict):
            raise DataError(f"{where}: gold_passages[{j}] should be an object with title and text")
        gold.append(
            Passage(
                str(passage.get("title") or ""),
                _need(passage, "text", f"{where}.gold_passages[{j}]", str),
            )
        )
    answers = _need(row, "answers", where, list)
    return RawExample(
        qid=str(_need(row, "qid", where, (str, int))),
        question=_need(row, "question", where, str),
        answers=_dedupe(str(a) for a in answers),
        gold_passages=gold,
        extra=row.get("extra") or {},
    )


def adapt_jsonl(path: Path) -> AdapterOutput:
    """Local JSONL already in the common schema (``pid`` is recomputed from content)."""
    return _adapt_rows(
        path, read_jsonl(path), lambda i, _: f"{path}: row {i + 1}", _common_schema_row
    )


ADAPTERS: dict[str, Callable[[Path], AdapterOutput]] = {
    "squad_v1": adapt_squad_v1,
    "bigbench_knowledge_conflicts": adapt_bigbench_knowledge_conflicts,
    "hf_nq_open_gold": adapt_hf_nq_open_gold,
    "hf_hotpotqa_distractor": adapt_hf_hotpotqa_distractor,
    "jsonl": adapt_jsonl,
}
BUILTIN_ADAPTERS = frozenset(ADAPTERS)


def register_adapter(name: str, read: Callable[[Path], AdapterOutput]) -> None:
    """Declare an adapter under the name ``datasets.<name>.adapter`` gives: a module the
    config lists under ``modules`` calls this when it is imported (every job imports the
    config's modules first). ``read`` takes the dataset asset's file and returns its
    questions; a second adapter under a taken name is an error."""
    if name in ADAPTERS and ADAPTERS[name] is not read:
        raise ValueError(f"an adapter named {name} is already registered")
    ADAPTERS[name] = read


def adapter_code_file(name: str) -> Path | None:
    """The file of an adapter a config module declared (its code is the dataset build's
    code besides the rule's script), or None for a built-in adapter, which that script's
    own code already covers."""
    if name in BUILTIN_ADAPTERS or name not in ADAPTERS:
        return None
    return Path(inspect.getfile(ADAPTERS[name])).resolve()


# --- filters, sampling, corpus ------------------------------------------------------------


def read_dataset(name: str, adapter: str, path: Path) -> AdapterOutput:
    """The adapter's reading of one dataset's file, which must hold questions: an empty
    file or one with no question is an error naming the dataset and the file, not an
    empty benchmark later on."""
    if path.is_file() and path.stat().st_size == 0:
        raise DataError(
            f"dataset {name}: its file {path} is empty; if the workflow fetched it, delete "
            "its asset folder under resources/ and run snakemake again, else fix the file"
        )
    # The built-in adapters check their malformed rows themselves; one from a module may not.
    output = _check_malformed(path, ADAPTERS[adapter](path))
    if not output.examples:
        raise DataError(
            f"dataset {name}: the {adapter} adapter found no question in {path} "
            f"({len(output.malformed)} malformed rows); is it the right file for this adapter?"
        )
    return output


def _is_yes_no(answer: str) -> bool:
    return answer.lower().strip(" .") in YES_NO


def scorable_aliases(answers: list[str], max_answer_tokens: int) -> list[str]:
    """Aliases a span answer can match: short (NQ-open's <= 5 tokens) and not yes/no.

    A yes/no alias beside real spans (SQuAD has "no" next to "He never graduated") is
    dropped, since the task requires extracting a real span.
    """
    return [
        a for a in answers if 0 < len(word_tokens(a)) <= max_answer_tokens and not _is_yes_no(a)
    ]


def exclusion_reason(example: RawExample, max_answer_tokens: int) -> str | None:
    """Why an example is not eligible (the paper's filters), or None when it is."""
    if not example.question.strip():
        return "empty_question"
    if not example.answers:
        return "no_answer"
    if all(_is_yes_no(a) for a in example.answers):
        return "yes_no_answer"
    if not scorable_aliases(example.answers, max_answer_tokens):
        return "no_short_answer"
    if not any(p.text.strip() for p in example.gold_passages):
        return "no_gold_passage"
    return None


def _eligible(
    output: AdapterOutput, max_answer_tokens: int
) -> tuple[list[RawExample], Counter[str]]:
    """The examples that pass the filters, in source order, and how many each exclusion
    reason removed. A duplicate question id, or no example left, is an error."""
    reasons: Counter[str] = Counter()
    eligible: list[RawExample] = []
    seen_qids: set[str] = set()
    for example in output.examples:
        if example.qid in seen_qids:
            raise DataError(
                f"duplicate question id '{example.qid}' in the source data; ids must be unique"
            )
        seen_qids.add(example.qid)
        reason = exclusion_reason(example, max_answer_tokens)
        if reason is None:
            eligible.append(example)
        else:
            reasons[reason] += 1
    if not eligible:
        raise DataError(
            f"no question passed the filters ({dict(reasons)}); check the adapter and the data file"
        )
    return eligible, reasons


def _question_row(example: RawExample, max_answer_tokens: int) -> dict[str, Any]:
    """One sampled question in the common schema (its non-empty gold passages once each)."""
    gold = list({p.pid: p for p in example.gold_passages if p.text.strip()}.values())
    return {
        "qid": example.qid,
        "question": example.question.strip(),
        "answers": scorable_aliases(example.answers, max_answer_tokens),
        "all_answers": example.answers,
        "gold_passages": [p.as_dict() for p in gold],
        "extra": example.extra,
    }


def _corpus(
    output: AdapterOutput,
    questions: list[dict[str, Any]],
    seed: int,
    corpus_max_passages: int | None,
) -> tuple[list[dict[str, str]], dict[str, Passage]]:
    """(the corpus, every source passage by pid). With a cap, the questions' gold passages
    stay, then passages sharing a title with them, then the rest in seeded order."""
    pool: dict[str, Passage] = {}
    for example in output.examples:
        for passage in example.gold_passages:
            if passage.text.strip():
                pool.setdefault(passage.pid, passage)
    for passage in output.other_passages:
        if passage.text.strip():
            pool.setdefault(passage.pid, passage)
    required = {p["pid"] for q in questions for p in q["gold_passages"]}
    corpus_ids = sorted(pool)
    if corpus_max_passages is not None and len(corpus_ids) > corpus_max_passages:
        titles = {p["title"] for q in questions for p in q["gold_passages"] if p["title"]}
        rest = [pid for pid in corpus_ids if pid not in required]
        random.Random(seed).shuffle(rest)
        rest.sort(key=lambda pid: pool[pid].title not in titles)  # stable: same-title first
        room = max(0, corpus_max_passages - len(required))
        corpus_ids = sorted(required) + rest[:room]
    return [pool[pid].as_dict() for pid in corpus_ids], pool


def build_dataset(
    output: AdapterOutput,
    n_questions: int,
    seed: int,
    max_answer_tokens: int = 5,
    corpus_max_passages: int | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, str]], dict[str, Any]]:
    """Filter, sample N with ``random.Random(seed)``, and build the passage corpus.

    Returns (questions, corpus, report). Questions keep the sampled order: position i
    is the ``i`` of every later ``Random(seed + i)``. The corpus holds every gold passage
    of every source question plus the adapter's other passages, deduplicated; with a cap,
    the sampled questions' gold passages always stay, then passages sharing a title with
    them (same-article distractors), then the rest in seeded order.
    """
    eligible, reasons = _eligible(output, max_answer_tokens)
    rng = random.Random(seed)
    sampled = rng.sample(eligible, min(n_questions, len(eligible)))
    questions = [_question_row(example, max_answer_tokens) for example in sampled]
    corpus, pool = _corpus(output, questions, seed, corpus_max_passages)
    report = {
        "source_questions": len(output.examples) + len(output.malformed),
        "malformed_rows": output.malformed,
        "eligible": len(eligible),
        "excluded": dict(sorted(reasons.items())),
        "sampled": len(questions),
        "requested": n_questions,
        "short_of_request": max(0, n_questions - len(questions)),
        "corpus_passages": len(corpus),
        "source_passages": len(pool),
        "gold_passages_per_question": dict(
            sorted(Counter(len(q["gold_passages"]) for q in questions).items())
        ),
        "seed": seed,
        "max_answer_tokens": max_answer_tokens,
    }
    return questions, corpus, report


def dataset_gold_texts(output: AdapterOutput) -> list[str]:
    """Texts of every gold passage of every question the adapter read (the whole split,
    before filters and sampling), deduplicated, in source order: the paper builds its
    replacement pool "over all gold passages in the dataset"."""
    return list(
        dict.fromkeys(p.text for e in output.examples for p in e.gold_passages if p.text.strip())
    )
