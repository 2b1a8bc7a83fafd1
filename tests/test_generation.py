"""Generation: output parsing and repair, resume logic, and the real SmolLM2 GGUF."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grabrag.core.io import read_checkpoint_rows, read_jsonl
from grabrag.core.parsing import PARSE_FAILED, PARSE_OK, PARSE_REPAIRED
from grabrag.generation.generator import (
    GenerationError,
    GenerationSettings,
    LlamaGenerator,
    parse_output,
    read_checkpoint,
    run_cells,
)
from grabrag.generation.prompts import GBNF_GRAMMAR, messages_for

from .conftest import CORES

# Modules that load numpy or torch: none may come before llama_cpp in a model script.
BEFORE_LLAMA = ("numpy", "torch", "grabrag", "transformers", "sentence_transformers")

VALID = '{"decision": "answer", "answer": "Denver Broncos", "confidence": 87, "reasoning": "p2"}'


@pytest.mark.parametrize(
    ("raw", "finish", "status", "answer"),
    [
        (VALID, "stop", PARSE_OK, "Denver Broncos"),
        (
            '{ "decision": "abstain", "answer": "", "confidence": 0, "reasoning": "" }',
            "stop",
            PARSE_OK,
            "",
        ),
        (VALID[:-8], "length", PARSE_REPAIRED, "Denver Broncos"),  # cut inside reasoning
        (VALID[:-1], "length", PARSE_REPAIRED, "Denver Broncos"),  # cut before the brace
        (VALID[:-5], "length", PARSE_REPAIRED, "Denver Broncos"),  # cut after the colon
        (VALID[: VALID.index('"reasoning')], "length", PARSE_REPAIRED, "Denver Broncos"),
        ('{"decision": "answer", "answer": "Denv', "length", PARSE_FAILED, None),  # no invention
        (VALID[:-8], "stop", PARSE_FAILED, None),  # only a cut-off output is repaired
        ("not json at all", "length", PARSE_FAILED, None),
        (VALID.replace("87", "101"), "stop", PARSE_FAILED, None),
        (VALID.replace('"answer",', '"maybe",', 1), "stop", PARSE_FAILED, None),
        (VALID.replace("87", "true"), "stop", PARSE_FAILED, None),
        # the grammar's strings allow a raw newline: grammar-valid output parses
        (VALID.replace("Denver Broncos", "Denver\nBroncos"), "stop", PARSE_OK, "Denver\nBroncos"),
    ],
)
def test_parse_output(raw: str, finish: str, status: str, answer: str | None) -> None:
    parsed = parse_output(raw, finish)
    assert parsed.status == status
    assert parsed.answer == answer
    if status == PARSE_FAILED:
        assert parsed.decision is None and parsed.confidence is None


def test_a_torn_checkpoint_line_is_ignored(tmp_path: Path) -> None:
    checkpoint = tmp_path / "c.jsonl"
    checkpoint.write_text(json.dumps({"qid": "a", "prompt": "P0"}) + '\n{"qid": "a", "pro')
    assert list(read_checkpoint(checkpoint)) == [("a", "P0")]
    # the torn tail is cut from the file, so the next appended row starts on its own line
    assert checkpoint.read_text() == json.dumps({"qid": "a", "prompt": "P0"}) + "\n"


def test_checkpoint_rows_drop_an_unterminated_last_row_and_filtered_rows(tmp_path: Path) -> None:
    checkpoint = tmp_path / "c.jsonl"
    first = json.dumps({"qid": "a", "run": 1})
    other = json.dumps({"qid": "b", "run": 2})
    # the last row is complete JSON but its newline was never written: it is torn too
    checkpoint.write_text(f"{first}\n{other}\n" + json.dumps({"qid": "c", "run": 1}))
    rows = read_checkpoint_rows(checkpoint, keep=lambda row: row["run"] == 1)
    assert rows == {("a",): {"qid": "a", "run": 1}}
    assert checkpoint.read_text() == first + "\n"
    assert read_checkpoint_rows(tmp_path / "none.jsonl") == {}
    assert not (tmp_path / "none.jsonl").exists()


def _rows(n: int) -> list[dict]:
    return [
        {
            "qid": f"q{i}",
            "index": i,
            "condition": "Q0",
            "question": f"question {i}?",
            "context": f"[1] passage {i}",
        }
        for i in range(n)
    ]


class ScriptedModel:
    """Stands in for the model only where the control flow of resumption is tested."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.resets = 0

    def complete(self, messages):
        self.calls.append(messages[1]["content"])
        return {
            "raw": VALID,
            "finish_reason": "stop",
            "prompt_tokens": 1,
            "completion_tokens": 1,
            "seconds": 0.0,
        }

    def reset(self) -> None:
        self.resets += 1


def test_resume_redoes_only_the_question_in_flight(tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint.jsonl"
    first = ScriptedModel()
    full = run_cells(first.complete, first.reset, _rows(3), ["P0", "P1", "P2"], checkpoint)
    lines = checkpoint.read_text().splitlines()
    assert len(lines) == 9
    # Killed after question 0 and one prompt of question 1:
    checkpoint.write_text("\n".join(lines[:4]) + "\n")
    second = ScriptedModel()
    resumed = run_cells(second.complete, second.reset, _rows(3), ["P0", "P1", "P2"], checkpoint)
    assert len(second.calls) == 6  # question 1 whole again, then question 2
    assert second.resets == 2
    assert resumed == full
    # calls of one question run back to back: P0, P1, P2 share their prefix
    assert [c.split("\n\n")[1] for c in first.calls[:3]] == ["Question: question 0?"] * 3


# --- the real model -------------------------------------------------------------------


@pytest.fixture(scope="module")
def generator(model_path: Path) -> LlamaGenerator:
    return LlamaGenerator(model_path, GenerationSettings(max_tokens=96), n_threads=CORES)


CONTEXT = (
    "[1] Super Bowl 50\nSuper Bowl 50 was an American football game. The American Football "
    "Conference (AFC) champion Denver Broncos defeated the Carolina Panthers 24-10.\n\n"
    "[2] Denver Broncos\nThe Denver Broncos are a professional football team based in Denver."
)


def test_real_model_outputs_follow_the_grammar(generator: LlamaGenerator) -> None:
    question = "Which NFL team represented the AFC at Super Bowl 50?"
    for prompt in ("P0", "P1", "P2", "CB"):
        generator.reset()
        result = generator.complete(messages_for(prompt, question, CONTEXT))
        parsed = parse_output(result["raw"], result["finish_reason"])
        assert parsed.status in (PARSE_OK, PARSE_REPAIRED), result
        assert parsed.decision in ("answer", "abstain")
        assert 0 <= parsed.confidence <= 100
        assert result["raw"].lstrip().startswith("{")
        assert "\\" not in result["raw"]  # the grammar forbids backslashes
        assert result["completion_tokens"] <= 96
        assert result["prompt_tokens"] > 50


def test_real_model_is_deterministic(generator: LlamaGenerator) -> None:
    messages = messages_for("P1", "Who defeated the Carolina Panthers?", CONTEXT)
    outputs = []
    for _ in range(2):
        generator.reset()
        outputs.append(generator.complete(messages)["raw"])
    assert outputs[0] == outputs[1]


def test_argmax_first_grammar_check_chooses_the_same_tokens(
    generator: LlamaGenerator, model_path: Path
) -> None:
    """Our greedy grammar path (grabrag.generation.greedy_grammar) against llama-cpp-python's own
    chain (grammar over the whole vocabulary at every token): the same text, token for
    token, for the answer grammar and for a grammar the model's argmax often breaks."""
    import llama_cpp

    generator.llm.argmax_first_counts.update(argmax=0, full=0)
    stock = llama_cpp.Llama(
        model_path=str(model_path), n_ctx=4096, n_threads=CORES, seed=42, verbose=False
    )
    digits = 'root ::= "{" [0-9] [0-9]? " apples}"'
    calls = [
        (messages_for(prompt, "Which team defeated the Carolina Panthers?", CONTEXT), gbnf)
        for prompt in ("P0", "P1", "CB")
        for gbnf in (None, digits)
    ]
    for messages, gbnf in calls:
        generator.reset()
        stock.reset()
        ours = generator.complete(messages, grammar=gbnf)
        theirs = stock.create_chat_completion(
            messages=messages,
            grammar=llama_cpp.LlamaGrammar.from_string(gbnf or GBNF_GRAMMAR, verbose=False),
            temperature=0.0,
            max_tokens=96,
            seed=42,
        )
        assert ours["raw"] == theirs["choices"][0]["message"]["content"], gbnf
        assert ours["completion_tokens"] == theirs["usage"]["completion_tokens"]
    # both paths ran: tokens the argmax check decided, and tokens where the grammar rejected
    # the argmax and the whole vocabulary was filtered
    counts = generator.llm.argmax_first_counts
    assert counts["argmax"] > 0 and counts["full"] > 0, counts


def test_prompt_too_long_for_the_context_window_fails_before_work(model_path: Path) -> None:
    settings = GenerationSettings(n_ctx=512, max_tokens=400)
    small = LlamaGenerator(model_path, settings, n_threads=CORES)
    calls = [("question q7 (P0)", messages_for("P0", "Who?", CONTEXT * 3))]
    with pytest.raises(GenerationError, match="question q7 \\(P0\\).*generation.n_ctx"):
        small.preflight(calls)


def test_missing_corrupt_model_and_unknown_chat_format(tmp_path: Path, model_path: Path) -> None:
    settings = GenerationSettings()
    with pytest.raises(GenerationError, match="does not exist"):
        LlamaGenerator(tmp_path / "nope.gguf", settings, n_threads=1)
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"<html>not a model</html>")
    with pytest.raises(GenerationError, match="not a GGUF file"):
        LlamaGenerator(corrupt, settings, n_threads=1)
    # cut short in the header and in the weights: llama.cpp's own reason, named truncated
    for kept in (1_000_000, model_path.stat().st_size - 1_000_000):
        truncated = tmp_path / "files" / "truncated.gguf"
        truncated.parent.mkdir(exist_ok=True)
        truncated.write_bytes(model_path.read_bytes()[:kept])
        with pytest.raises(GenerationError, match="is truncated") as error:
            LlamaGenerator(truncated, settings, n_threads=1)
        assert f"Delete {tmp_path} and run snakemake again to fetch it" in str(error.value)
    with pytest.raises(GenerationError, match="unknown chat format 'chatgpt-9'"):
        LlamaGenerator(model_path, settings, n_threads=1, chat_format="chatgpt-9")


@pytest.mark.integration
def test_generation_rows_have_every_column(tiny_run: Path) -> None:
    cell = tiny_run / "results/generation/micro/nq_bigbench/Q50/P1.jsonl"
    rows = read_jsonl(cell)
    assert len(rows) == 2
    columns = {
        "qid",
        "index",
        "condition",
        "prompt",
        "decision",
        "answer",
        "confidence",
        "reasoning",
        "parse_status",
        "raw",
        "finish_reason",
        "prompt_tokens",
        "completion_tokens",
        "seconds",
        "batch",
    }
    assert all(set(r) == columns for r in rows)
    assert {r["prompt"] for r in rows} == {"P1"} and {r["condition"] for r in rows} == {"Q50"}
    report = json.loads((tiny_run / "results/generation/micro/nq_bigbench/report.json").read_text())
    assert set(report["cells"]) == {
        f"{c}/{p}" for c in ("Q100", "Q50", "Q0", "QC", "QX") for p in ("P0", "P1", "P2")
    } | {"Qclosed/CB"}
    n_qc = len(read_jsonl(tiny_run / "results/contexts/nq_bigbench/QC.jsonl"))
    for name, cell in report["cells"].items():
        expected = n_qc if name.startswith(("QC/", "QX/")) else 2  # QX has QC's questions
        assert sum(cell["parse_status"].values()) == expected, name
    assert not (tiny_run / "results/generation/micro/nq_bigbench/Q50/.checkpoint.jsonl").exists()


def test_gpu_offload_on_a_cpu_only_build_is_refused_unless_allowed() -> None:
    from grabrag.generation.generator import check_gpu_offload

    assert check_gpu_offload(0, False, supports_gpu=False) is None
    assert check_gpu_offload(-1, False, supports_gpu=True) is None
    with pytest.raises(GenerationError, match=r"n_gpu_layers: -1.*GGML_CUDA=on.*--no-cache-dir"):
        check_gpu_offload(-1, False, supports_gpu=False)
    warning = check_gpu_offload(20, True, supports_gpu=False)
    assert warning and "allow_cpu: true" in warning


def test_generator_checks_this_llama_cpp_build_before_loading(tmp_path: Path) -> None:
    import llama_cpp

    missing = tmp_path / "never-loaded.gguf"
    settings = GenerationSettings()
    if llama_cpp.llama_supports_gpu_offload():
        expected = "does not exist"  # a GPU build goes on to load the model
    else:
        expected = "no GPU support"  # a CPU build stops first
    with pytest.raises(GenerationError, match=expected):
        LlamaGenerator(missing, settings, n_threads=1, n_gpu_layers=-1)
    with pytest.raises(GenerationError, match="does not exist"):
        LlamaGenerator(missing, settings, n_threads=1, n_gpu_layers=-1, allow_cpu=True)
    # the model jobs build theirs from the model's config entry, with the same checks
    entry = {"n_gpu_layers": -1, "allow_cpu": False, "chat_format": None}
    with pytest.raises(GenerationError, match=expected):
        LlamaGenerator.for_model(missing, settings, entry, n_threads=1)
    with pytest.raises(GenerationError, match="does not exist"):
        LlamaGenerator.for_model(missing, settings, {**entry, "allow_cpu": True}, n_threads=1)


def test_model_scripts_import_llama_cpp_before_numpy_and_torch() -> None:
    from grabrag.generation.generator import MODEL_SCRIPTS

    from .conftest import REPO

    for name in MODEL_SCRIPTS:
        lines = (REPO / "workflow/scripts" / f"{name}.py").read_text().splitlines()
        imports = [line for line in lines if line.startswith(("import ", "from "))]
        first = next(i for i, line in enumerate(imports) if line.startswith("import llama_cpp"))
        earlier = [line for line in imports[:first] if "_grabrag_path" not in line]
        assert not [line for line in earlier if any(m in line for m in BEFORE_LLAMA)], name


def test_device_line_names_the_cpu_or_the_claimed_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from grabrag.generation.generator import device_line

    assert device_line(0, True, 2) == "on the CPU (n_gpu_layers: 0), 2 threads"
    assert device_line(0, True, 1) == "on the CPU (n_gpu_layers: 0), 1 thread"
    assert device_line(-1, False, 4) == (
        "on the CPU (this llama.cpp build has no GPU backend), 4 threads"
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert device_line(-1, True, 4) == "on GPU 1: all layers offloaded, 4 CPU threads"
    assert device_line(20, True, 4) == "on GPU 1: 20 layers offloaded, 4 CPU threads"


@pytest.mark.integration
def test_each_model_job_logs_the_device_it_runs_on(tiny_run: Path) -> None:
    logs = tiny_run / "results/logs"
    for log in (
        "generate/micro/nq_bigbench/Q100.log",
        "generate/micro/nq_bigbench/Qclosed.log",
        "evidential_evaluate/micro/nq_bigbench/Q100.log",
        "cdd_generate/micro/nq_bigbench/Q100.log",
    ):
        text = (logs / log).read_text()
        assert "model micro-smollm2.gguf on the CPU (n_gpu_layers: 0)" in text, log
