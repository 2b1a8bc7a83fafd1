"""The endpoint backend against llama-cpp-python's own OpenAI-compatible server (the real
`python -m llama_cpp.server`, the micro model, CPU), one server for the module: agreement
with the in-process backend, order under concurrency, the response cache, and every fault
produced for real (a stopped server, a wrong key, an unknown model, a failing, slow or
truncating handler in front of the real server)."""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from grabrag.generation.batching import Request
from grabrag.generation.endpoint import EndpointError, EndpointGenerator
from grabrag.generation.generator import (
    GenerationSettings,
    LlamaGenerator,
    cell_report,
    run_cells,
)
from grabrag.generation.prompts import GBNF_GRAMMAR, messages_for
from grabrag.generation.served_proof import (
    CANARY_WORDS_GRAMMAR,
    PARTLY_APPLIED,
    REFUSED,
    VALID,
    CanaryError,
    grammar_verdict,
    identity_hash,
)
from grabrag.policies.nli import LlmNli

from .conftest import (
    AUDIT_MODEL_RULES,
    CORES,
    KEY,
    KEY_VARIABLE,
    MODEL_RULES,
    SERVED_NAME,
    TINY,
    copy_run,
    ensure_micro_model,
    free_port,
    planned_jobs,
    snakemake,
)

SETTINGS = GenerationSettings(n_ctx=4096, max_tokens=64)
QUESTIONS = [
    ("q1", "Who wrote Hamlet?", "[1] Hamlet\nHamlet is a tragedy written by William Shakespeare."),
    ("q2", "What is the capital of France?", "[1] Paris\nParis is the capital of France."),
    ("q3", "When did the war end?", "[1] Treaty\nThe treaty of 1648 ended the war in Europe."),
]
ROWS = [
    {"qid": qid, "index": i, "condition": "Q100", "question": q, "context": c}
    for i, (qid, q, c) in enumerate(QUESTIONS)
]
PROMPTS = ("P0", "P1", "P2")
# The fields of OpenAI's own chat API that every request carries (the `none` and
# `json_schema` dialects send nothing else; a hosted API refuses fields it does not know).
OPENAI_FIELDS = {
    "model", "messages", "temperature", "top_p", "presence_penalty", "frequency_penalty",
    "seed", "max_tokens",
}  # fmt: skip


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_VARIABLE, KEY)


def endpoint(base_url: str, **extra: object) -> dict[str, object]:
    return {
        "base_url": base_url,
        "model": SERVED_NAME,
        "api_key_env": KEY_VARIABLE,
        "constraint": "gbnf",
        "concurrency": 1,
        "timeout_s": 60,
        "max_retries": 2,
        "backoff_s": 0.05,
        **extra,
    }


def served(base_url: str, tmp_path: Path, **extra: object) -> EndpointGenerator:
    return EndpointGenerator(
        "micro", endpoint(base_url, **extra), SETTINGS, cache_path=tmp_path / "cache.sqlite"
    )


def generate(generator: object, tmp_path: Path, name: str) -> dict[str, list[dict]]:
    return run_cells(
        generator.complete,  # type: ignore[attr-defined]
        generator.reset,  # type: ignore[attr-defined]
        ROWS,
        PROMPTS,
        tmp_path / f"{name}.checkpoint.jsonl",
        batcher=generator.batcher,  # type: ignore[attr-defined]
    )


def flat(cells: dict[str, list[dict]]) -> list[dict]:
    return [row for prompt in PROMPTS for row in cells[prompt]]


@pytest.fixture(scope="module")
def in_process_rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    """The same calls through the in-process backend (batch 1, the server's threads)."""
    generator = LlamaGenerator(ensure_micro_model(), SETTINGS, n_threads=CORES)
    return flat(generate(generator, tmp_path_factory.mktemp("in_process"), "in_process"))


def test_served_rows_agree_with_in_process(
    server: str, in_process_rows: list[dict], tmp_path: Path
) -> None:
    """Same GGUF, same settings: decision, answer and raw output agree call by call, in
    question order, one call at a time and four in flight; each row says it was served."""
    for concurrency in (1, 4):
        rows = flat(generate(served(server, tmp_path, concurrency=concurrency), tmp_path, "s"))
        assert [(r["qid"], r["prompt"]) for r in rows] == [
            (r["qid"], r["prompt"]) for r in in_process_rows
        ]
        assert [(r["decision"], r["answer"]) for r in rows] == [
            (r["decision"], r["answer"]) for r in in_process_rows
        ], concurrency
        assert [r["raw"] for r in rows] == [r["raw"] for r in in_process_rows]
        assert all(r["batch"] == concurrency for r in rows)
        assert {r["served"]["host"] for r in rows} == {server.split("/")[2]}
        assert {r["served"]["model"] for r in rows} == {SERVED_NAME}
        assert {r["served"]["constraint"] for r in rows} == {"gbnf"}
        (tmp_path / "s.checkpoint.jsonl").unlink()
        (tmp_path / "cache.sqlite").unlink()


def test_cache_answers_a_rerun_without_calls(server: str, tmp_path: Path) -> None:
    first = served(server, tmp_path)
    rows = flat(generate(first, tmp_path, "first"))
    assert not any(r["served"]["cached"] for r in rows)
    # The same server (its identity asked, as every job does) behind a handler that
    # counts the chat requests: every call of the rerun comes from the cache.
    with FaultyProxy(upstream(server)) as proxy:
        again = served(proxy.url, tmp_path)
        cached = flat(generate(again, tmp_path, "again"))
    assert proxy.seen == 0
    assert all(r["served"]["cached"] for r in cached)
    assert [r["raw"] for r in cached] == [r["raw"] for r in rows]
    assert again.report()["cache_hits"] == len(rows)


def test_resume_from_checkpoint_after_kill(server: str, tmp_path: Path) -> None:
    """A job killed mid-cell resumes from its checkpoint; the unfinished question's calls
    are redone (from the cache) and the rows equal an uninterrupted run's."""
    whole = flat(generate(served(server, tmp_path / "a"), tmp_path, "whole"))
    script = tmp_path / "killed.py"
    checkpoint = tmp_path / "killed.checkpoint.jsonl"
    spec = {
        "workflow": str(Path(__file__).resolve().parents[1] / "workflow"),
        "endpoint": endpoint(server),
        "cache": str(tmp_path / "b.sqlite"),
        "rows": ROWS,
        "prompts": list(PROMPTS),
        "checkpoint": str(checkpoint),
    }
    script.write_text(
        f"""
import json, os, signal, sys
from pathlib import Path
spec = json.loads({json.dumps(spec)!r})
sys.path.insert(0, spec["workflow"])
from grabrag.generation.endpoint import EndpointGenerator
from grabrag.generation.generator import GenerationSettings, run_cells
settings = GenerationSettings(n_ctx=4096, max_tokens=64)
gen = EndpointGenerator("micro", spec["endpoint"], settings, cache_path=Path(spec["cache"]))
calls = []
def complete(messages):
    calls.append(1)
    if len(calls) == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return gen.complete(messages)
run_cells(complete, gen.reset, spec["rows"], spec["prompts"], Path(spec["checkpoint"]))
"""
    )
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert len(checkpoint.read_text().splitlines()) == 4
    resumed = EndpointGenerator(
        "micro", endpoint(server), SETTINGS, cache_path=tmp_path / "b.sqlite"
    )
    rows = flat(run_cells(resumed.complete, resumed.reset, ROWS, PROMPTS, checkpoint, batcher=None))
    assert [(r["qid"], r["prompt"], r["raw"]) for r in rows] == [
        (r["qid"], r["prompt"], r["raw"]) for r in whole
    ]
    # q1's three calls came from the checkpoint; q2's finished call was redone whole with
    # the question, from the cache; q3's three went to the server.
    assert resumed.calls == 6 and resumed.cache_hits == 1


# --- faults, produced for real ---------------------------------------------------------------


def test_connection_refused_is_named(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(EndpointError, match=r"failed 3 attempts: cannot connect .*refused"):
        served(url, tmp_path)


def test_wrong_key_names_the_variable(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEY_VARIABLE, "not-the-key")
    with pytest.raises(EndpointError, match=rf"refused the API key in \${KEY_VARIABLE} \(HTTP 401"):
        served(server, tmp_path)
    monkeypatch.delenv(KEY_VARIABLE)
    with pytest.raises(EndpointError, match=rf"names {KEY_VARIABLE}, which is not set"):
        served(server, tmp_path)
    with pytest.raises(EndpointError, match=r"asks for an API key .*api_key_env"):
        served(server, tmp_path, api_key_env=None)


def test_unknown_model_is_named(server: str, tmp_path: Path) -> None:
    with pytest.raises(EndpointError, match=rf"does not serve model 'gpt-x' .*{SERVED_NAME}"):
        served(server, tmp_path, model="gpt-x")


class FaultyProxy:
    """A handler in front of the real server: the first ``fail`` chat requests answered
    with ``status``, or each delayed ``delay`` s, or each body cut to ``truncate`` bytes."""

    def __init__(
        self,
        upstream: str,
        fail: int = 0,
        status: int = 503,
        delay: float = 0.0,
        truncate: int | None = None,
        rewrite: Callable[[dict], dict] | None = None,
        models: Callable[[dict], dict] | None = None,
        props: dict | None = None,
    ) -> None:
        self.upstream, self.fail, self.status = upstream, fail, status
        self.delay, self.truncate, self.seen = delay, truncate, 0
        self.rewrite, self.bodies = rewrite, []
        # what the server says of itself: /v1/models' answer rewritten, and llama-server's
        # /props served (llama-cpp-python's server has no /props: a 404 when None)
        self.models, self.props = models, props
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _reply(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _forward(self, body: bytes | None) -> None:
                if self.path == "/props":
                    if proxy.props is None:
                        return self._reply(404, b'{"error": {"message": "Not Found"}}')
                    return self._reply(200, json.dumps(proxy.props).encode())
                if self.path.endswith("/chat/completions"):
                    proxy.seen += 1
                    if proxy.seen <= proxy.fail:
                        self.send_response(proxy.status)
                        self.end_headers()
                        self.wfile.write(b'{"error": {"message": "overloaded"}}')
                        return
                    time.sleep(proxy.delay)
                    if body is not None:
                        proxy.bodies.append(json.loads(body))
                    if proxy.rewrite is not None and body is not None:
                        body = json.dumps(proxy.rewrite(json.loads(body))).encode()
                headers = {k: v for k, v in self.headers.items() if k != "Content-Length"}
                request = urllib.request.Request(
                    proxy.upstream + self.path, data=body, headers=headers
                )
                with urllib.request.urlopen(request, timeout=60) as reply:
                    data = reply.read()
                if proxy.truncate is not None and self.path.endswith("/chat/completions"):
                    data = data[: proxy.truncate]
                if proxy.models is not None and self.path.endswith("/models"):
                    data = json.dumps(proxy.models(json.loads(data))).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._forward(None)

            def do_POST(self) -> None:  # noqa: N802
                self._forward(self.rfile.read(int(self.headers["Content-Length"])))

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        # a client that gave up (the timeout test) leaves a broken pipe: not a failure
        self.httpd.handle_error = lambda *args: None  # type: ignore[method-assign]
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def __enter__(self) -> FaultyProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()


def upstream(server: str) -> str:
    return server.rsplit("/v1", 1)[0]


def one_call(generator: EndpointGenerator) -> dict:
    row = ROWS[0]
    return generator.complete(messages_for("P0", row["question"], row["context"]))


def test_server_stopped_mid_cell_is_named_and_loses_no_finished_question(
    server: str, tmp_path: Path
) -> None:
    """The server goes away after the fourth call of a cell (question 2 in flight): the
    job stops with the refused connection named, the finished calls stay in the
    checkpoint, and the rerun against a live server finishes the cell to the uninterrupted
    rows."""
    whole = flat(generate(served(server, tmp_path / "a"), tmp_path, "whole"))
    checkpoint = tmp_path / "stopped.checkpoint.jsonl"
    with FaultyProxy(upstream(server)) as proxy:
        generator = served(proxy.url, tmp_path / "b")
        calls = []

        def complete(messages: list[dict[str, str]]) -> dict:
            if len(calls) == 4:
                proxy.httpd.shutdown()
                proxy.httpd.server_close()  # the port now refuses connections
            calls.append(1)
            return generator.complete(messages)

        with pytest.raises(EndpointError, match=r"failed 3 attempts: cannot connect .*refused"):
            run_cells(complete, generator.reset, ROWS, PROMPTS, checkpoint)
        proxy.httpd.shutdown = lambda: None  # type: ignore[method-assign]  (already down)
    # every finished call is kept: question 1's three and question 2's first
    assert len(checkpoint.read_text().splitlines()) == 4
    resumed = served(server, tmp_path / "b")
    rows = flat(run_cells(resumed.complete, resumed.reset, ROWS, PROMPTS, checkpoint))
    assert [(r["qid"], r["prompt"], r["raw"]) for r in rows] == [
        (r["qid"], r["prompt"], r["raw"]) for r in whole
    ]
    # questions 2 and 3 only; question 2's finished call came from the response cache
    assert resumed.calls == 6 and resumed.cache_hits == 1


def test_overloaded_server_is_retried(server: str, tmp_path: Path) -> None:
    with FaultyProxy(upstream(server), fail=2, status=503) as proxy:
        result = one_call(served(proxy.url, tmp_path))
    assert proxy.seen == 3 and result["raw"]


def test_persistent_failure_and_timeout_and_truncation_are_named(
    server: str, tmp_path: Path
) -> None:
    with FaultyProxy(upstream(server), fail=99, status=500) as proxy:
        with pytest.raises(EndpointError, match=r"failed 3 attempts: HTTP 500 \(overloaded\)"):
            one_call(served(proxy.url, tmp_path))
    with FaultyProxy(upstream(server), delay=3.0) as proxy:
        with pytest.raises(EndpointError, match=r"failed 1 attempt: no answer within timeout_s 1"):
            one_call(served(proxy.url, tmp_path, timeout_s=1, max_retries=0))
    with FaultyProxy(upstream(server), truncate=40) as proxy:
        with pytest.raises(EndpointError, match=r"failed 3 attempts: .*(not JSON|broke off)"):
            one_call(served(proxy.url, tmp_path))


def test_refused_constraint_is_named(server: str, tmp_path: Path) -> None:
    """A server that rejects the grammar field: a 400 naming the dialect to change."""
    with FaultyProxy(upstream(server), fail=99, status=400) as proxy:
        proxy_error = b'{"error": {"message": "unknown field: grammar"}}'
        handler = proxy.httpd.RequestHandlerClass

        def reject(self: http.server.BaseHTTPRequestHandler) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(400)
            self.end_headers()
            self.wfile.write(proxy_error)

        handler.do_POST = reject  # type: ignore[method-assign]
        with pytest.raises(EndpointError, match=r"refused the 'gbnf' constraint .*constraint"):
            one_call(served(proxy.url, tmp_path))


def test_no_constraint_sends_only_openai_fields_and_counts_unreadable_outputs(
    server: str, tmp_path: Path
) -> None:
    """`constraint: none` (a hosted API that takes no grammar): the request carries no
    grammar and no field outside OpenAI's chat API, the call is answered, the row says it
    was unconstrained, and an output the parser cannot read is a counted parse failure."""
    generator = served(server, tmp_path, constraint="none")
    row = ROWS[0]
    request = Request(messages_for("P0", row["question"], row["context"]), GBNF_GRAMMAR, 64)
    body = generator.request_body(request)
    assert set(body) == OPENAI_FIELDS, set(body) - OPENAI_FIELDS
    cells = generate(generator, tmp_path, "unconstrained")
    rows = flat(cells)
    assert {r["served"]["constraint"] for r in rows} == {"none"}
    assert all(r["raw"] for r in rows)
    # the micro model, unconstrained, does not write the paper's JSON: each such output is
    # a parse failure of its row, never a silent answer
    for r in rows:
        assert r["parse_status"] in ("ok", "repaired", "failed"), r
        if r["parse_status"] == "failed":
            assert r["decision"] is None and r["answer"] is None, r
    failed = [r for r in rows if r["parse_status"] == "failed"]
    assert failed, [r["raw"] for r in rows]
    counted = sum(cell_report(cells[p])["parse_status"]["failed"] for p in PROMPTS)
    assert counted == len(failed)


def as_openai_structured_outputs(body: dict) -> dict:
    """What OpenAI's API does with a request, in llama-cpp-python's server's own terms: a
    `response_format` JSON schema constrains the output (the server takes it as
    `json_object` with a `schema`), and no repetition penalty applies (the server's default
    is 1.1). The real server then builds its grammar from the schema itself."""
    body = {**body, "repeat_penalty": 1.0}
    structured = body.get("response_format") or {}
    if structured.get("type") == "json_schema":
        schema = structured["json_schema"]["schema"]
        body["response_format"] = {"type": "json_object", "schema": schema}
    return body


def test_json_schema_constrains_the_calls_through_a_real_server(
    server: str, tmp_path: Path
) -> None:
    """`constraint: json_schema` (OpenAI's structured outputs) in front of the real server:
    only OpenAI's request fields go out, with the schema derived from each call's grammar;
    every output the server finished is a JSON object with the paper's fields in the
    grammar's order, and the verifier's bare label comes back out of its {"label": ...}
    object. (On the micro model's near-random weights the schema's grammar, which differs
    from ours in whitespace and escapes, leads greedy decoding elsewhere than ours, so the
    rows are not compared with the in-process ones; the server also lets through values
    its converter does not bound, such as a negative confidence, which the parser counts
    as a failure of its row.)"""
    with FaultyProxy(upstream(server), rewrite=as_openai_structured_outputs) as proxy:
        generator = served(proxy.url, tmp_path, constraint="json_schema")
        cells = generate(generator, tmp_path, "structured")
        sent = proxy.bodies[-1]
        labels = LlmNli(generator, name="micro").classify(
            [("Paris is the capital of France.", "Paris is in France.")] * 2
        )
    assert set(sent) == OPENAI_FIELDS | {"response_format"}, set(sent) - OPENAI_FIELDS
    structured = sent["response_format"]
    assert structured["type"] == "json_schema" and structured["json_schema"]["strict"]
    rows = flat(cells)
    assert {r["served"]["constraint"] for r in rows} == {"json_schema"}
    finished = [json.loads(r["raw"], strict=False) for r in rows if r["finish_reason"] == "stop"]
    assert finished, [r["raw"] for r in rows]
    for output in finished:
        assert list(output) == ["decision", "answer", "confidence", "reasoning"], output
        assert output["decision"] in ("answer", "abstain"), output
    failed = sum(cell_report(cells[p])["parse_status"]["failed"] for p in PROMPTS)
    assert failed == sum(r["parse_status"] == "failed" for r in rows)
    assert len(labels) == 2 and set(labels) <= {"entailment", "neutral", "contradiction"}


def test_every_stage_grammar_has_its_json_schema() -> None:
    """Each grammar a stage sends converts, field for field in the grammar's order, and a
    grammar with no JSON equivalent is refused by name before any call."""
    from grabrag.cdd.schema import GATE_GRAMMAR, REASONING_FIRST_GRAMMAR, STEP_GRAMMARS
    from grabrag.evidential.evaluator import EVALUATOR_GRAMMAR
    from grabrag.generation.json_schema import SchemaError, schema_for
    from grabrag.policies.nli import NLI_GRAMMAR

    paper, wrapped = schema_for(GBNF_GRAMMAR)
    assert not wrapped and list(paper["properties"]) == [
        "decision", "answer", "confidence", "reasoning",
    ]  # fmt: skip
    assert paper["properties"]["decision"] == {"type": "string", "enum": ["answer", "abstain"]}
    assert paper["properties"]["confidence"] == {"type": "integer", "minimum": 0, "maximum": 100}
    assert paper["required"] == list(paper["properties"]) and not paper["additionalProperties"]
    evaluator, _ = schema_for(EVALUATOR_GRAMMAR)
    assert evaluator["properties"]["evidence"] == {"type": "integer", "minimum": 0, "maximum": 10}
    premise, _ = schema_for(STEP_GRAMMARS["premise"])
    assert premise["properties"]["passage"] == {"type": "integer", "minimum": 0, "maximum": 99}
    assert schema_for(GATE_GRAMMAR)[0]["properties"] == {"contradict": {"type": "boolean"}}
    assert list(schema_for(REASONING_FIRST_GRAMMAR)[0]["properties"])[0] == "reasoning"
    label, wrapped = schema_for(NLI_GRAMMAR)
    assert wrapped and label["properties"]["label"]["enum"] == [
        "entailment", "neutral", "contradiction",
    ]  # fmt: skip
    for grammar in STEP_GRAMMARS.values():
        schema_for(grammar)
    with pytest.raises(SchemaError, match="not a literal or a character class"):
        schema_for('root ::= "{" ws "\\"n\\":" ws num ws "}"\nnum ::= [0-9]+\nws ::= " "?\n')
    with pytest.raises(SchemaError, match="not a finite choice"):
        schema_for('root ::= "{" ws "\\"n\\":" ws num ws "}"\nnum ::= [^x]\nws ::= " "?\n')
    unconstrainable = EndpointGenerator(
        "m",
        {"base_url": "http://127.0.0.1:9/v1", "model": "m", "constraint": "json_schema"},
        SETTINGS,
        cache_path=None,
        check=False,
    )
    with pytest.raises(EndpointError, match=r"json_schema: this call's grammar has no JSON"):
        unconstrainable.request_body(
            Request([{"role": "user", "content": "hi"}], "root ::= [a-z]+\n", 8)
        )


def test_server_key_is_never_written(server: str, tmp_path: Path) -> None:
    generator = served(server, tmp_path)
    result = one_call(generator)
    assert KEY not in json.dumps(result)
    assert KEY.encode() not in (tmp_path / "cache.sqlite").read_bytes()
    assert os.environ[KEY_VARIABLE] == KEY


# --- a served model proves itself: the canary, its identity, its window --------------------


def without_constraint(body: dict) -> dict:
    """A server that accepts every constraint dialect's fields and applies none."""
    dropped = ("grammar", "structured_outputs", "ebnf", "response_format")
    return {k: v for k, v in body.items() if k not in dropped}


def as_llama_cpp_grammar(body: dict) -> dict:
    """What vLLM and SGLang do with their dialect's grammar, in llama-cpp-python's
    server's terms: the GBNF of `structured_outputs.grammar` (vLLM) or `ebnf` (SGLang)
    constrains the decode, with no repetition penalty."""
    grammar = (body.get("structured_outputs") or {}).get("grammar") or body.get("ebnf")
    body = {k: v for k, v in body.items() if k not in ("structured_outputs", "ebnf")}
    return {**body, "grammar": grammar, "repeat_penalty": 1.0}


def test_grammar_check_reads_words_objects_and_cut_replies() -> None:
    assert grammar_verdict(CANARY_WORDS_GRAMMAR, "yes", "stop") == VALID
    assert grammar_verdict(CANARY_WORDS_GRAMMAR, "The sea is blue.", "stop") == REFUSED
    good = '{"decision": "answer", "answer": "x\tz", "confidence": 7, "reasoning": "y"}'
    assert grammar_verdict(GBNF_GRAMMAR, good, "stop") == VALID
    assert grammar_verdict(GBNF_GRAMMAR, good.replace("7", "885"), "stop") == PARTLY_APPLIED
    assert grammar_verdict(GBNF_GRAMMAR, good.replace('"answer",', '"maybe",'), "stop") == REFUSED
    assert grammar_verdict(GBNF_GRAMMAR, "The sea is blue and wide.", "stop") == REFUSED
    # cut at the token limit: only a reply that opens as the grammar must
    cut = '{"decision":"answer", "answer": "the se'
    assert grammar_verdict(GBNF_GRAMMAR, cut, "length") == VALID
    assert grammar_verdict(GBNF_GRAMMAR, "The sea is blue and", "length") == REFUSED


@pytest.mark.parametrize("dialect", ["gbnf", "vllm", "sglang", "json_schema"])
def test_canary_passes_a_server_that_applies_the_constraint_and_stops_one_that_drops_it(
    server: str, tmp_path: Path, dialect: str
) -> None:
    """The real server behind a handler that speaks each dialect as its engine does
    (vLLM's and SGLang's grammar fields, OpenAI's JSON schema, all turned into what
    llama-cpp-python's server applies): the canary's probes come back grammar-valid. The
    same handler dropping the constraint: the canary stops, naming the model, the dialect
    and what came back."""
    honest = {
        "gbnf": None,
        "vllm": as_llama_cpp_grammar,
        "sglang": as_llama_cpp_grammar,
        "json_schema": as_openai_structured_outputs,
    }[dialect]
    with FaultyProxy(upstream(server), rewrite=honest) as proxy:
        record = served(proxy.url, tmp_path, constraint=dialect).canary()
        assert record["proven"] and record["constraint"] == dialect
        # llama-cpp-python's server builds its grammar from a JSON schema without the
        # confidence's 0-100 range: the canary records it and lets it pass (an output out
        # of range is a counted parse failure)
        paper = PARTLY_APPLIED if dialect == "json_schema" else VALID
        assert [p["verdict"] for p in record["probes"]] == [VALID, paper], record
        assert record["fully_applied"] == (paper == VALID)
        assert record["identity"]["model"] == SERVED_NAME
        # llama-cpp-python's server reports no window: the run's and the paper's beside it
        assert record["window"] == {"server": None, "configured": 4096, "paper": 4096}
        calls = proxy.seen
        # the canary asks the server itself each time: never the response cache
        served(proxy.url, tmp_path, constraint=dialect).canary()
        assert proxy.seen == calls + 2
        proxy.rewrite = lambda body: without_constraint(body)
        with pytest.raises(CanaryError, match=rf"models\.micro: .* ignored the '{dialect}' "):
            served(proxy.url, tmp_path, constraint=dialect).canary()
    # unconstrained, nothing is proven and nothing stops: the outputs are counted
    record = served(server, tmp_path, constraint="none").canary()
    assert not record["proven"]


def test_changed_identity_reuses_no_cached_response_and_fails_its_canary(
    server: str, tmp_path: Path
) -> None:
    """Other weights behind the same served name (vLLM's /v1/models root changes): no
    cached response is reused, the rows say which identity made them, and a job holding
    the old server's canary stops."""
    with FaultyProxy(upstream(server)) as proxy:
        first = served(proxy.url, tmp_path)
        canary = tmp_path / "canary.json"
        canary.write_text(json.dumps(first.canary()))
        rows = [one_call(first)]
        same = EndpointGenerator(
            "micro", endpoint(proxy.url), SETTINGS, tmp_path / "cache.sqlite", canary=canary
        )
        assert one_call(same)["served"]["cached"]
        proxy.models = lambda listed: {
            **listed,
            "data": [{**m, "root": "/models/other-weights"} for m in listed["data"]],
        }
        other = served(proxy.url, tmp_path)
        assert other.server["root"] == "/models/other-weights"
        assert other.server_id != first.server_id == identity_hash(first.server)
        calls = proxy.seen
        rows.append(one_call(other))
        assert proxy.seen == calls + 1 and not rows[1]["served"]["cached"]
        assert [r["served"]["identity"] for r in rows] == [first.server_id, other.server_id]
        with pytest.raises(EndpointError, match=r"no longer is the server its canary proved"):
            EndpointGenerator(
                "micro", endpoint(proxy.url), SETTINGS, tmp_path / "c.sqlite", canary=canary
            )


@pytest.mark.parametrize(
    ("models", "props", "window"),
    [
        ({"max_model_len": 512}, None, 512),  # vLLM's /v1/models
        ({}, {"default_generation_settings": {"n_ctx": 1024}, "model_path": "m.gguf"}, 1024),
    ],
    ids=["vllm", "llama-server"],
)
def test_a_server_window_smaller_than_n_ctx_is_a_named_config_error(
    server: str, tmp_path: Path, models: dict, props: dict | None, window: int
) -> None:
    def reported(listed: dict) -> dict:
        return {**listed, "data": [{**m, **models} for m in listed["data"]]}

    with FaultyProxy(upstream(server), models=reported, props=props) as proxy:
        with pytest.raises(
            EndpointError,
            match=rf"context window of {window} tokens, smaller than generation\.n_ctx 4096 "
            r".*--max-model-len 4096.*-c 4096",
        ):
            served(proxy.url, tmp_path)
        assert proxy.seen == 0  # before any call
        # a window that fits: recorded beside the run's and the paper's
        roomy = {k: 8192 for k in models}
        proxy.models = lambda listed: {**listed, "data": [{**m, **roomy} for m in listed["data"]]}
        if props is not None:
            proxy.props = {**props, "default_generation_settings": {"n_ctx": 8192}}
        generator = served(proxy.url, tmp_path)
        assert generator.window() == {"server": 8192, "configured": 4096, "paper": 4096}


def test_a_cache_hit_reports_the_calls_own_latency(server: str, tmp_path: Path) -> None:
    """A cached call is not a 0 s call in the cost tables: its row keeps the seconds the
    call took when it was made, and says what the lookup took beside them."""
    with FaultyProxy(upstream(server), delay=0.5) as proxy:
        made = one_call(served(proxy.url, tmp_path))
        cached = one_call(served(proxy.url, tmp_path))
    assert made["seconds"] >= 0.5 and not made["served"]["cached"]
    assert cached["served"]["cached"] and cached["seconds"] == made["seconds"]
    assert cached["served"]["lookup_seconds"] < 0.5


# --- the tiny config's model stages through the server ----------------------------------------


def served_config(base_url: str, dest: Path, concurrency: int) -> Path:
    """The tiny config with its model served instead of loaded in the jobs."""
    config = yaml.safe_load(TINY.read_text())
    config["models"] = {
        "micro": {"endpoint": endpoint(base_url, concurrency=concurrency, max_retries=1)}
    }
    dest.write_text(yaml.safe_dump(config))
    return dest


# The cells the workflow test reruns through the server: NQ's QC and closed-book cells.
CELL = re.compile(r"/(QC|Qclosed)(/|\.jsonl$)")
# What a row decided: a generation or baseline row's decision and answer, an EvidentialRAG
# evaluator's judgement, an EVID row's generator output.
OUTCOME_FIELDS = (
    "decision",
    "answer",
    "stance",
    "value",
    "claim",
    "generator_decision",
    "generator_answer",
)


@pytest.mark.integration
def test_tiny_config_model_stages_through_the_server(
    server: str, tiny_run: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Every model stage of the tiny config (generation, closed book, the LLM verifier,
    EvidentialRAG's evaluator and generator, CDD's steps and baselines; the TruthfulQA
    probe runs these same rules on its own dataset) runs through llama_cpp.server on a copy
    of the tiny run; the jobs take no GPU
    slot, every row of a model call says it was served, and the rows agree with the
    in-process run's (the same micro model, batch 2 against concurrency 2)."""
    copy_run(tiny_run, tmp_path)
    proxy = FaultyProxy(upstream(server), rewrite=without_constraint)
    request.addfinalizer(proxy.httpd.shutdown)
    config = served_config(proxy.url, tmp_path / "served.yaml", concurrency=2)
    # Every model stage's outputs the tiny run has for NQ's QC cell and its closed-book
    # cell (NQ is the dataset every method runs on: generation, closed book, the verifier,
    # EvidentialRAG's evaluator and generator, CDD and the baselines)
    targets = sorted(
        str(path.relative_to(tiny_run))
        for stage in ("generation", "nli", "evidential", "cdd")
        for path in (tiny_run / "results" / stage / "micro" / "nq_bigbench").rglob("*")
        if path.is_file() and not path.name.startswith(".") and CELL.search(str(path))
    )
    cells = sorted(p for p in (tmp_path / "results").rglob("*.jsonl") if "/micro/" in str(p))
    before = {p: p.read_bytes() for p in cells}
    # A server that drops the constraint: the canary stops the run before any cell
    proc = snakemake(tmp_path, *targets, configfile=config, env={KEY_VARIABLE: KEY}, check=False)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "ignored the 'gbnf' constraint of model 'micro-served'" in output, output[-3000:]
    assert {p: p.read_bytes() for p in cells} == before
    assert not list((tmp_path / "results").rglob(".*checkpoint.jsonl"))
    # the same server applying it: the canary passes and the cells are made
    proxy.rewrite = None
    proc = snakemake(tmp_path, *targets, configfile=config, env={KEY_VARIABLE: KEY})
    output = proc.stdout + proc.stderr
    jobs = planned_jobs(output)
    canary = json.loads((tmp_path / "results/endpoint/micro/canary.json").read_text())
    assert canary["proven"] and canary["identity"]["model"] == SERVED_NAME, canary
    assert MODEL_RULES - AUDIT_MODEL_RULES <= set(jobs), jobs
    # nothing upstream of the model stages reran: only the model jobs and what reads them
    assert not set(jobs) & {"prepare_data", "embed", "retrieve", "build_contexts", "swaps"}, jobs
    # a served model's jobs hold no GPU slot (Snakemake prints each job's resources)
    assert "gpu=0" in output and "gpu=1" not in output
    compared = agreed = raw_agreed = 0
    for stage in ("generation", "nli", "evidential", "cdd"):
        for cell in sorted(
            (tmp_path / "results" / stage / "micro" / "nq_bigbench").rglob("*.jsonl")
        ):
            if not CELL.search(str(cell)):
                continue
            rows = [json.loads(line) for line in cell.read_text().splitlines()]
            if cell.name.startswith(".") or not rows or "raw" not in rows[0]:
                continue
            theirs = [
                json.loads(line)
                for line in (tiny_run / cell.relative_to(tmp_path)).read_text().splitlines()
            ]
            assert len(rows) == len(theirs), cell
            for row, their in zip(rows, theirs, strict=True):
                assert row["served"]["model"] == SERVED_NAME, (cell, row)
                assert row["served"]["constraint"] == "gbnf", (cell, row)
                assert row["served"]["identity"] == canary["identity_hash"], (cell, row)
                compared += 1
                fields = [k for k in OUTCOME_FIELDS if k in row]
                agreed += all(row[k] == their[k] for k in fields)
                raw_agreed += row["raw"] == their["raw"]
    # CDD's traces: each step the model answered says it was served
    traces = tmp_path / "results/cdd/micro/nq_bigbench/QC/traces.jsonl"
    steps = [
        entry
        for line in traces.read_text().splitlines()
        for entry in json.loads(line)["trace"].values()
        if entry["origin"] == "generated" and entry["raw"] is not None
    ]
    assert steps and all(e["served"]["model"] == SERVED_NAME for e in steps), steps
    print(f"served vs in-process: {agreed}/{compared} decision+answer, {raw_agreed} raw")
    assert compared > 15, compared
    assert agreed == compared, f"{agreed}/{compared} agree ({raw_agreed} raw)"

    # The re-ask audit through the server: a cell's first question sent again one call at
    # a time (the cell ran at concurrency 2), to the server and never from the cache
    audited = tmp_path / "audited.yaml"
    settings = yaml.safe_load(config.read_text())
    audited.write_text(yaml.safe_dump({**settings, "reask_audit": {"questions": 1}}))
    reask = "results/reask/micro/nq_bigbench/QC.jsonl"
    proc = snakemake(tmp_path, reask, configfile=audited, env={KEY_VARIABLE: KEY})
    assert planned_jobs(proc.stdout + proc.stderr) == {"reask": 1}
    reasked = [json.loads(line) for line in (tmp_path / reask).read_text().splitlines()]
    qc = tmp_path / "results/generation/micro/nq_bigbench/QC"
    for row in reasked:
        own = json.loads((qc / f"{row['prompt']}.jsonl").read_text().splitlines()[0])
        assert (row["qid"], row["batch"], own["batch"]) == (own["qid"], 1, 2)
        assert row["served"]["cached"] is False and row["served"]["model"] == SERVED_NAME
        assert row["served"]["identity"] == canary["identity_hash"]
    assert len(reasked) == 3

    # Other weights behind the same served name: a model job that runs now stops, naming it
    proxy.models = lambda listed: {
        **listed,
        "data": [{**m, "root": "/models/other-weights"} for m in listed["data"]],
    }
    closed_book = "results/generation/micro/nq_bigbench/Qclosed/CB.jsonl"
    proc = snakemake(
        tmp_path,
        closed_book,
        "--forcerun",
        "generate_closed_book",
        configfile=config,
        env={KEY_VARIABLE: KEY},
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "no longer is the server its canary proved" in output, output[-3000:]
    # the canary made again: every cell of the model reruns under the new identity, each
    # call sent to the server (no cached response of the old identity answers)
    calls = proxy.seen
    proc = snakemake(
        tmp_path, *targets, "--forcerun", "endpoint_canary", configfile=config,
        env={KEY_VARIABLE: KEY},
    )  # fmt: skip
    assert MODEL_RULES - AUDIT_MODEL_RULES <= set(planned_jobs(proc.stdout + proc.stderr))
    renewed = json.loads((tmp_path / "results/endpoint/micro/canary.json").read_text())
    assert renewed["identity"]["root"] == "/models/other-weights"
    rows = [json.loads(line) for line in (tmp_path / closed_book).read_text().splitlines()]
    assert {r["served"]["identity"] for r in rows} == {renewed["identity_hash"]}
    assert not any(r["served"]["cached"] for r in rows)
    assert proxy.seen - calls >= compared
