"""The NLI verifier: label names, rows, a real tiny DeBERTa-v2 classifier and the real GGUF."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from grabrag.core.errors import DataError
from grabrag.data.assets import resolve
from grabrag.policies.nli import (
    LABELS,
    LazyVerifier,
    LlmNli,
    NliError,
    TransformersNli,
    canonical_label,
    hypothesis,
    label_map,
    lazy_verifier,
    nli_report,
    nli_rows,
)

from .conftest import RESOURCES, snakemake

MNLI_ORDER = {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"}  # e.g. roberta-large-mnli
USUAL_ORDER = {0: "entailment", 1: "neutral", 2: "contradiction"}  # e.g. DeBERTa-v3 NLI

# transformers' DeBERTa code calls torch.jit.script, which torch now deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")


def test_hypothesis_text() -> None:
    assert (
        hypothesis("who sang i'm gonna run away from you", "Tami Lynn")
        == "The answer to who sang i'm gonna run away from you is Tami Lynn."
    )


# --- label names ----------------------------------------------------------------------


def test_label_map_reads_id2label_in_any_order() -> None:
    assert label_map(MNLI_ORDER, "m") == {0: "contradiction", 1: "neutral", 2: "entailment"}
    assert label_map(USUAL_ORDER, "m") == {0: "entailment", 1: "neutral", 2: "contradiction"}
    # config.json keys are strings; names vary in case and form
    assert label_map({"0": "Entailment", "1": "Neutral", "2": "Contradictory"}, "m") == {
        0: "entailment",
        1: "neutral",
        2: "contradiction",
    }


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("ENTAILMENT", "entailment"),
        ("entailed", "entailment"),
        (" Neutral ", "neutral"),
        ("contradiction", "contradiction"),
        ("not_entailment", None),
        ("LABEL_0", None),
    ],
)
def test_canonical_label(name: str, label: str | None) -> None:
    assert canonical_label(name) == label


@pytest.mark.parametrize(
    "id2label",
    [
        {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"},  # a config without label names
        {0: "entailment", 1: "not_entailment"},  # a two-way model
        {0: "entailment", 1: "neutral", 2: "neutral"},  # contradiction missing
        {0: "entailment", 1: "neutral", 2: "contradiction", 3: "other"},
    ],
)
def test_label_map_rejects_non_nli_heads(id2label: dict) -> None:
    with pytest.raises(NliError, match="NLI model my-model:"):
        label_map(id2label, "my-model")


# --- rows -----------------------------------------------------------------------------


class RecordingVerifier:
    """Labels a pair 'contradiction' when its premise says 'not'; records every call."""

    name = "fake:recorder"

    def __init__(self) -> None:
        self.calls: list[list[tuple[str, str]]] = []

    def classify(self, pairs):
        self.calls.append(list(pairs))
        return ["contradiction" if "not" in premise else "neutral" for premise, _ in pairs]


def _context(qid: str, index: int, texts: list[str], question: str | None = None) -> dict:
    return {
        "qid": qid,
        "index": index,
        "condition": "QC",
        "question": question or f"what is {qid}",
        "answers": ["x"],
        "passages": [
            {"pid": f"{qid}-p{k}", "title": "t", "text": text, "role": "hard_negative"}
            for k, text in enumerate(texts)
        ],
        "context": "",
    }


def _cb(qid: str, decision: str | None, answer: str | None, confidence: int | None) -> dict:
    return {
        "qid": qid,
        "prompt": "CB",
        "decision": decision,
        "answer": answer,
        "confidence": confidence,
        "parse_status": "failed" if decision is None else "ok",
    }


def test_nli_rows_run_only_where_p4_needs_them_in_one_batch() -> None:
    contexts = [
        _context("a", 0, ["yes", "not so", "maybe", "fine", "ok"]),
        _context("b", 1, ["one", "two"]),  # CB abstained
        _context("c", 2, ["three"]),  # CB confidence 49
        _context("d", 3, ["four", "five"]),  # confidence exactly 50: verified
        _context("e", 4, ["six"]),  # CB parse failed
    ]
    cb_rows = [
        _cb("e", None, None, None),
        _cb("d", "answer", "Rome", 50),
        _cb("c", "answer", "Milan", 49),
        _cb("b", "abstain", "", 99),
        _cb("a", "answer", "Paris", 90),
        _cb("zz", "answer", "unused", 90),
    ]
    verifier = RecordingVerifier()
    rows = nli_rows(contexts, cb_rows, verifier, cutoff=50)
    assert len(verifier.calls) == 1  # batched across questions
    assert verifier.calls[0][:2] == [
        ("yes", "The answer to what is a is Paris."),
        ("not so", "The answer to what is a is Paris."),
    ]
    assert len(verifier.calls[0]) == 7
    assert [r["qid"] for r in rows] == ["a", "b", "c", "d", "e"]
    a, b, c, d, e = rows
    assert a == {
        "qid": "a",
        "index": 0,
        "condition": "QC",
        "hypothesis": "The answer to what is a is Paris.",
        "cb_answer": "Paris",
        "cb_confidence": 90,
        "labels": ["neutral", "contradiction", "neutral", "neutral", "neutral"],
        "pids": ["a-p0", "a-p1", "a-p2", "a-p3", "a-p4"],
        "verifier": "fake:recorder",
        "batch": 1,  # a verifier without a decoding batch: one call at a time
        "skipped_reason": None,
    }
    assert d["labels"] == ["neutral", "neutral"] and d["skipped_reason"] is None
    assert [(r["skipped_reason"], r["labels"], r["hypothesis"]) for r in (b, c, e)] == [
        ("cb_abstained", [], None),
        ("cb_low_confidence", [], None),
        ("cb_parse_failed", [], None),
    ]
    report = nli_report(rows)
    assert report["verified"] == 2 and report["with_contradiction"] == 1
    assert report["skipped"] == {"cb_abstained": 1, "cb_low_confidence": 1, "cb_parse_failed": 1}


def test_nli_rows_need_a_cb_row_per_question() -> None:
    with pytest.raises(DataError, match=r"no closed-book \(CB\) row for qid b "):
        nli_rows(
            [_context("a", 0, ["x"]), _context("b", 1, ["y"])],
            [_cb("a", "answer", "x", 90)],
            RecordingVerifier(),
        )
    with pytest.raises(DataError, match="prompt 'P1'; the NLI rule was given the wrong"):
        nli_rows(
            [_context("a", 0, ["x"])],
            [{**_cb("a", "answer", "x", 90), "prompt": "P1"}],
            RecordingVerifier(),
        )
    verifier = RecordingVerifier()
    rows = nli_rows([_context("a", 0, ["x"])], [_cb("a", "abstain", "", 90)], verifier)
    assert verifier.calls == [] and rows[0]["skipped_reason"] == "cb_abstained"


# --- a real, tiny, randomly initialised DeBERTa-v2 classifier -------------------------

SENTENCES = [
    "The Denver Broncos defeated the Carolina Panthers in Super Bowl 50.",
    "Paris is the capital and most populous city of France.",
    "The answer to who won the game is the Denver Broncos.",
    "Tami Lynn was born in Gert Town, New Orleans, Louisiana.",
    "A river flows through the valley between two mountains.",
]


def spm_model() -> bytes:
    """A tiny SentencePiece unigram model with DeBERTa-v3's special pieces (spm.model)."""
    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES * 10),
        model_writer=model,
        vocab_size=80,
        model_type="unigram",
        pad_id=0,
        unk_id=1,
        bos_id=2,
        eos_id=3,
        pad_piece="[PAD]",
        unk_piece="[UNK]",
        bos_piece="[CLS]",
        eos_piece="[SEP]",
        user_defined_symbols=["[MASK]"],
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return model.getvalue()


def _tokenizer():
    import sentencepiece as spm
    from transformers import DebertaV2Tokenizer

    processor = spm.SentencePieceProcessor(model_proto=spm_model())
    vocab = [(processor.id_to_piece(i), processor.get_score(i)) for i in range(len(processor))]
    return DebertaV2Tokenizer(vocab=vocab)


def _save_classifier(target: Path, tokenizer, id2label: dict, state=None) -> Path:
    import torch
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    torch.manual_seed(0)
    config = DebertaV2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        initializer_range=0.5,  # wide weights: scores that differ from pair to pair
        num_labels=3,
        id2label=id2label,
        label2id={name: index for index, name in id2label.items()},
    )
    model = DebertaV2ForSequenceClassification(config)
    if state is not None:
        model.load_state_dict(state)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)
    return target


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """Three local classifiers: random weights, and a head that always picks index 0
    saved under two id2label orders."""
    import torch

    work = tmp_path_factory.mktemp("tiny_deberta")
    tokenizer = _tokenizer()
    random_dir = _save_classifier(work / "random", tokenizer, MNLI_ORDER)
    from transformers import DebertaV2ForSequenceClassification

    model = DebertaV2ForSequenceClassification.from_pretrained(random_dir)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor([5.0, 0.0, 0.0]))
    state = model.state_dict()
    return {
        "random": random_dir,
        "index0_mnli": _save_classifier(work / "index0_mnli", tokenizer, MNLI_ORDER, state),
        "index0_usual": _save_classifier(work / "index0_usual", tokenizer, USUAL_ORDER, state),
        "no_names": _save_classifier(
            work / "no_names", tokenizer, {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}
        ),
    }


PAIRS = [
    (SENTENCES[0], "The answer to who won Super Bowl 50 is the Denver Broncos."),
    (SENTENCES[1], "The answer to what is the capital of France is Paris."),
    (SENTENCES[3] * 40, "The answer to where was Tami Lynn born is Gert Town."),  # truncated
    ("", "The answer to who won is nobody."),
]


def test_transformers_backend_runs_for_real(
    tiny_models: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("INFO", logger="grabrag"):
        verifier = TransformersNli(tiny_models["random"], batch_size=3)
    assert verifier.name == "transformers:random"
    # the job's log says where the model runs
    assert "NLI model random on the CPU" in caplog.text
    labels = verifier.classify(PAIRS)
    assert len(labels) == len(PAIRS) and set(labels) <= set(LABELS)
    # the label is the model's argmax read through its own id2label
    logits = verifier.logits(PAIRS)
    expected = [MNLI_ORDER[max(range(3), key=s.__getitem__)].lower() for s in logits]
    assert labels == expected
    # padding in a batch does not change the scores
    single = TransformersNli(tiny_models["random"], batch_size=1).logits(PAIRS)
    flat = [x for scores in logits for x in scores]
    assert [x for scores in single for x in scores] == pytest.approx(flat, rel=1e-4, abs=1e-5)
    assert len({tuple(round(x, 3) for x in scores) for scores in logits}) == len(PAIRS)


def test_transformers_backend_reads_labels_from_the_model_config(tiny_models) -> None:
    # Same weights, the head always picks index 0; the label follows each config's id2label.
    assert TransformersNli(tiny_models["index0_mnli"]).classify(PAIRS[:2]) == ["contradiction"] * 2
    assert TransformersNli(tiny_models["index0_usual"]).classify(PAIRS[:2]) == ["entailment"] * 2


def test_transformers_backend_errors(tiny_models, tmp_path: Path) -> None:
    with pytest.raises(NliError, match="NLI model no_names: label 0 is 'LABEL_0'"):
        TransformersNli(tiny_models["no_names"])
    with pytest.raises(NliError, match="is not a folder"):
        TransformersNli(tmp_path / "absent")
    with pytest.raises(NliError, match="NLI model empty: cannot load"):
        TransformersNli(tmp_path, name="empty")  # a folder without a model


def test_transformers_backend_in_nli_rows(tiny_models) -> None:
    verifier = TransformersNli(tiny_models["index0_mnli"], batch_size=4, name="tiny")
    contexts = [_context("a", 0, SENTENCES[:5]), _context("b", 1, SENTENCES[:2])]
    rows = nli_rows(
        contexts, [_cb("a", "answer", "Paris", 90), _cb("b", "answer", "Rome", 90)], verifier
    )
    assert [r["labels"] for r in rows] == [["contradiction"] * 5, ["contradiction"] * 2]
    assert rows[0]["verifier"] == "transformers:tiny"


# --- the embedded GGUF under the three-label grammar -----------------------------------


@pytest.fixture(scope="module")
def llm_verifier(tmp_path_factory) -> LlmNli:
    from grabrag.generation.generator import GenerationSettings, LlamaGenerator

    manifest = RESOURCES / "smollm2-135m-instruct-q4_1" / "manifest.json"
    if not manifest.exists():
        snakemake(tmp_path_factory.mktemp("fetch"), str(manifest))
    generator = LlamaGenerator(resolve(manifest), GenerationSettings(n_ctx=1024), n_threads=1)
    return LlmNli(generator)


def test_llm_backend_labels_follow_the_grammar(llm_verifier: LlmNli) -> None:
    passages = [
        "The Denver Broncos defeated the Carolina Panthers 24-10 in Super Bowl 50.",
        "Paris is the capital and most populous city of France.",
    ]
    contexts = [_context("sb50", 0, passages, question="who won Super Bowl 50")]
    cb_rows = [_cb("sb50", "answer", "Denver Broncos", 90)]
    rows = nli_rows(contexts, cb_rows, llm_verifier)
    assert rows[0]["hypothesis"] == "The answer to who won Super Bowl 50 is Denver Broncos."
    assert rows[0]["verifier"] == "llm:SmolLM2-135M-Instruct.Q4_1.gguf"
    assert len(rows[0]["labels"]) == 2
    assert set(rows[0]["labels"]) <= set(LABELS)


def test_nli_device_auto_uses_cuda_only_where_torch_has_it() -> None:
    import torch

    from grabrag.policies.nli import torch_device

    assert torch_device("cpu", "m") == "cpu"
    assert torch_device("auto", "m") == ("cuda" if torch.cuda.is_available() else "cpu")
    if torch.cuda.is_available():
        assert torch_device("cuda", "m") == "cuda"
    else:
        with pytest.raises(NliError, match="sees no CUDA GPU.*nli.device: cpu"):
            torch_device("cuda", "m")


def test_a_cell_without_pairs_loads_no_verifier_and_one_with_pairs_loads_it_once() -> None:
    loads: list[RecordingVerifier] = []

    def load() -> RecordingVerifier:
        loads.append(RecordingVerifier())
        return loads[-1]

    skipped = [_context("b", 0, ["one"])]
    lazy = LazyVerifier("fake:recorder", 8, load)
    rows = nli_rows(skipped, [_cb("b", "abstain", "", 99)], lazy, cutoff=50)
    assert loads == [] and rows[0]["verifier"] == "fake:recorder"
    verified = [_context("a", 0, ["not here"]), _context("c", 1, ["fine"])]
    cb_rows = [_cb("a", "answer", "Paris", 90), _cb("c", "answer", "Rome", 80)]
    assert nli_rows(verified, cb_rows, lazy, cutoff=50)[0]["labels"] == ["contradiction"]
    nli_rows(verified, cb_rows, lazy, cutoff=50)
    assert len(loads) == 1 and len(loads[0].calls) == 2
    with pytest.raises(NliError, match="loaded as fake:recorder, not transformers:other"):
        LazyVerifier("transformers:other", 8, RecordingVerifier).classify([("a", "b")])


def test_the_lazy_verifier_is_named_as_the_loaded_one(tiny_models) -> None:
    lazy = lazy_verifier("transformers", tiny_models["random"], batch_size=4, name="nli-x")
    eager = TransformersNli(tiny_models["random"], batch_size=4, name="nli-x")
    assert (lazy.name, lazy.batch_size) == (eager.name, eager.batch_size)
    pairs = [("Paris is in France.", "Paris is in Spain.")]
    assert lazy.classify(pairs) == eager.classify(pairs)
    unnamed = lazy_verifier("transformers", tiny_models["random"])
    assert unnamed.name == TransformersNli(tiny_models["random"]).name
    with pytest.raises(NliError, match="unknown NLI backend 'bert'"):
        lazy_verifier("bert", tiny_models["random"])


def test_the_probe_scorer_reads_label_probabilities_by_id2label(tiny_models) -> None:
    """The TruthfulQA probe's entailment scorer over the real transformers backend: the
    probabilities are named by the model's id2label (the always-index-0 head is
    contradiction in MNLI's order, entailment in the usual one), sum to one, and the
    scorer judges every item (random weights: mechanics only)."""
    from grabrag.evaluation.entailment import label_probabilities, nli_scorer

    pairs = [("Q? It is red.", "Q? It is blue."), ("Q? Yes.", "Q? No.")]
    mnli = TransformersNli(tiny_models["index0_mnli"])
    usual = TransformersNli(tiny_models["index0_usual"])
    for model, top in ((mnli, "contradiction"), (usual, "entailment")):
        for probabilities in label_probabilities(model, pairs):
            assert max(probabilities, key=probabilities.get) == top
            assert sum(probabilities.values()) == pytest.approx(1.0)
    scorer = nli_scorer(tiny_models["random"], name="random")
    question = {"question": "Q?", "true_answers": ["a", "b"], "false_answers": ["c"]}
    verdicts = scorer.judge_many([("x", question), ("y", question)])
    assert len(verdicts) == 2 and scorer.name == "nli:random"
    assert all(0 <= v.true_support <= 1 and 0 <= v.false_support <= 1 for v in verdicts)
    # the always-contradiction head contradicts true and false answers alike: a tie
    tie = nli_scorer(tiny_models["index0_mnli"], name="m").judge_many([("x", question)])
    assert not tie[0].truthful and tie[0].true_support == tie[0].false_support
