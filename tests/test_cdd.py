"""CDD: step grammars and parsing, the pipeline with a scripted completer,
the CDD-alpha gate, the prompt-only baselines and the trace diagnostics. No model runs
here: the completer is a script, which tests the pipeline logic only."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import pytest

from grabrag.cdd import baselines as cdd_baselines
from grabrag.cdd import gate as cdd_gate
from grabrag.cdd import prompts as cdd_prompts
from grabrag.cdd import schema as cdd_schema
from grabrag.cdd import trace_diagnostics as cdd_trace
from grabrag.cdd.baselines import (
    BASELINE_PROMPTS,
    baseline_messages,
    length_matched,
    within_length,
    word_count,
)
from grabrag.cdd.gate import (
    GATE_THRESHOLD,
    cdd_alpha_decision,
    cdd_alpha_row,
    gate_route,
    gate_score,
)
from grabrag.cdd.method import run_cdd
from grabrag.cdd.parsing import parametric_from_closed_book, parse_step, premise_found
from grabrag.cdd.prompts import STEP_INSTRUCTIONS, resolution_messages, step_messages
from grabrag.cdd.schema import (
    ABLATED,
    CONTEXTUAL,
    DIVERGENCE,
    FAILED,
    GATE_BYPASS,
    NO_PAIR,
    NOT_DIVERGENT,
    OK,
    PARAMETRIC,
    PREMISE,
    REPAIRED,
    RESOLUTION,
    RESOLVED,
    SKIPPED,
    STEP_GRAMMARS,
    STEPS,
    TRUNCATED,
)
from grabrag.cdd.trace_diagnostics import (
    OTHER_TYPES,
    PAPER_TYPES,
    causal_sensitivity,
    inject_mistake,
    perturbation_type,
    rerun_resolution,
    sensitivity_bootstrap,
    source_control,
    truncate_trace,
)
from grabrag.core.parsing import RULE_PARSE_FAILED
from grabrag.core.text import normalize_answer
from grabrag.generation.generator import parse_output
from grabrag.generation.prompts import (
    GBNF_GRAMMAR,
    POLICY_INSTRUCTIONS,
    RESPONSE_FORMAT,
    SYSTEM_CONTEXT,
    context_user_prompt,
)
from grabrag.report.cdd_tables import CDD_TYPES

QUESTION = "Where is the Eiffel Tower?"
CONTEXT = (
    "[1] Eiffel Tower\nThe Eiffel Tower is a wrought-iron lattice tower in Lyon.\n"
    "It was built for the 1889 World's Fair.\n\n"
    "[2] Gustave Eiffel\nGustave Eiffel was a French civil engineer."
)
PREMISE_QUOTE = "The Eiffel Tower is a wrought-iron lattice tower in Lyon."


def obj(**fields: Any) -> str:
    return json.dumps(fields)


# --- grammars: a small GBNF checker ------------------------------------------------------
#
# llama.cpp is not loaded here, so the grammars are checked by translating them into a
# Python regex (they have no recursion): every line must be one complete rule, every
# token must be a GBNF literal, character class, rule name or operator, every name must
# be defined. Canonical outputs must then match and off-grammar ones must not.

_TOKEN = re.compile(
    r'\s*(?:("(?:[^"\\]|\\.)*")|(\[(?:[^\]\\]|\\.)*\])|([a-z][a-z0-9-]*)|([|()*+?]))'
)


def grammar_regex(grammar: str) -> re.Pattern[str]:
    rules: dict[str, str] = {}
    for line in grammar.splitlines():
        if not line.strip():
            continue
        name, sep, body = line.partition(" ::= ")
        assert sep, f"not a one-line rule: {line!r}"
        assert re.fullmatch(r"[a-z][a-z0-9-]*", name), name
        assert name not in rules, f"rule {name} defined twice"
        rules[name] = body.strip()

    def expand(name: str, depth: int = 0) -> str:
        assert depth < 10, "recursive grammar"
        assert name in rules, f"rule {name!r} is used but not defined"
        body, out, pos = rules[name], [], 0
        while pos < len(body):
            match = _TOKEN.match(body, pos)
            assert match is not None and match.end() > pos, f"bad GBNF at {body[pos:]!r}"
            literal, char_class, ident, op = match.groups()
            if literal is not None:
                out.append(re.escape(re.sub(r"\\(.)", r"\1", literal[1:-1])))
            elif char_class is not None:
                out.append(char_class)
            elif ident is not None:
                out.append(f"(?:{expand(ident, depth + 1)})")
            else:
                out.append("(?:" if op == "(" else op)
            pos = match.end()
        return "".join(out)

    assert "root" in rules
    return re.compile(f"(?:{expand('root')})")


def test_the_checker_accepts_grabrags_own_grammar() -> None:
    pattern = grammar_regex(GBNF_GRAMMAR)
    assert pattern.fullmatch(
        '{"decision": "answer", "answer": "x", "confidence": 7, "reasoning": ""}'
    )


VALID = {
    CONTEXTUAL: [obj(answer="Lyon", confidence=90), '{"answer":"","confidence":0}'],
    PARAMETRIC: [obj(answer="Paris", confidence=100)],
    DIVERGENCE: [
        obj(diverge=True, explanation="Lyon is not Paris."),
        obj(diverge=False, explanation=""),
    ],
    PREMISE: [obj(passage=1, premise=PREMISE_QUOTE), obj(passage=0, premise="")],
    RESOLUTION: [
        obj(decision="answer", answer="Paris", confidence=85, source="parametric", rationale="r"),
        '{\n"decision": "abstain",\n"answer": "", "confidence": 0, "source": "neither", '
        '"rationale": "line\nbreak"}',
    ],
}
OFF_GRAMMAR = {
    CONTEXTUAL: [obj(answer="Lyon", confidence=101), obj(confidence=9, answer="Lyon")],
    PARAMETRIC: [obj(answer="Paris", confidence=-1)],
    DIVERGENCE: [obj(diverge="yes", explanation=""), '{"diverge": true}'],
    PREMISE: [obj(passage=100, premise=""), '{"passage": 1, "premise": "say \\"x\\""}'],
    RESOLUTION: [
        obj(decision="maybe", answer="", confidence=0, source="neither", rationale=""),
        obj(decision="answer", answer="P", confidence=5, source="both", rationale=""),
    ],
}


@pytest.mark.parametrize("step", STEPS)
def test_step_grammars_are_valid_one_line_gbnf(step: str) -> None:
    grammar = STEP_GRAMMARS[step]
    lines = grammar.strip().splitlines()
    assert len(lines) == grammar.count("::=")  # every rule on exactly one line
    pattern = grammar_regex(grammar)
    for raw in VALID[step]:
        assert pattern.fullmatch(raw), raw
        assert parse_step(step, raw, "stop", context=CONTEXT).status == OK, raw
    for raw in OFF_GRAMMAR[step]:
        assert not pattern.fullmatch(raw), raw


def test_grammars_use_grabrags_string_and_confidence_rules() -> None:
    shared = set(GBNF_GRAMMAR.splitlines()[1:])  # ws, str, decision, confidence
    for grammar in STEP_GRAMMARS.values():
        for line in grammar.splitlines()[1:]:
            name = line.split(" ::= ")[0]
            if name in {"ws", "str", "decision", "confidence"}:
                assert line in shared
    assert STEP_GRAMMARS[CONTEXTUAL] == (
        'root ::= "{" ws "\\"answer\\":" ws str "," ws "\\"confidence\\":" ws confidence '
        'ws "}"\nws ::= [ \\t\\n]*\nstr ::= "\\"" [^"\\\\]* "\\""\n'
        'confidence ::= "0" | [1-9] | [1-9][0-9] | "100"\n'
    )


# --- parsing -----------------------------------------------------------------------------


NO_ANSWER = {"answer": "", "confidence": None}  # steps 1/2 fallback
NO_DECISION = dict.fromkeys(("decision", "answer", "confidence", "source", "rationale"))
LYON_90 = {"answer": "Lyon", "confidence": 90}
RESOLVED_HEAD = (
    '{"decision": "answer", "answer": "Paris", "confidence": 80, "source": "parametric", '
    '"rationale": "'
)


@pytest.mark.parametrize(
    ("step", "raw", "finish", "status", "fields"),
    [
        # steps 1/2: a number cut at the end is not trusted; one followed by ws is
        (CONTEXTUAL, obj(**LYON_90), "stop", OK, LYON_90),
        (CONTEXTUAL, '{"answer": "Lyon", "confidence": 9', "length", FAILED, NO_ANSWER),
        (CONTEXTUAL, '{"answer": "Lyon", "confidence": 90 ', "length", REPAIRED, LYON_90),
        (CONTEXTUAL, '{"answer": "Ly', "length", FAILED, NO_ANSWER),
        (PARAMETRIC, "not json", "stop", FAILED, NO_ANSWER),
        # step 3: the explanation (last string) is closed; nothing is invented
        (
            DIVERGENCE,
            '{"diverge": true, "explanation": "Lyon vs Pa',
            "length",
            REPAIRED,
            {"diverge": True, "explanation": "Lyon vs Pa"},
        ),
        (
            DIVERGENCE,
            '{"diverge": false, "explanation": ""',
            "length",
            REPAIRED,
            {"diverge": False, "explanation": ""},
        ),
        (DIVERGENCE, '{"diverge": true, "expl', "length", FAILED, None),  # fallback: trace
        # step 5: the rationale is closed; a cut inside the answer fails
        (
            RESOLUTION,
            RESOLVED_HEAD + "the tower is in Pa",
            "length",
            REPAIRED,
            {
                "decision": "answer",
                "answer": "Paris",
                "confidence": 80,
                "source": "parametric",
                "rationale": "the tower is in Pa",
            },
        ),
        (RESOLUTION, '{"decision": "answer", "answer": "Par', "length", FAILED, NO_DECISION),
        # not cut by max_tokens: no repair
        (RESOLUTION, RESOLVED_HEAD, "stop", FAILED, NO_DECISION),
    ],
)
def test_parse_step(step: str, raw: str, finish: str, status: str, fields: dict | None) -> None:
    result = parse_step(step, raw, finish, context=CONTEXT)
    assert result.status == status
    if fields is None:  # step 3 without a trace: both answers empty, no divergence
        fields = {"diverge": False, "explanation": ""}
    assert result.fields == fields
    assert result.fallback is (status == FAILED)
    assert result.raw == raw


def test_parse_step_ignores_extra_keys_and_rejects_bool_confidence() -> None:
    assert parse_step(CONTEXTUAL, obj(answer="x", confidence=5, extra=1), "stop").fields == {
        "answer": "x",
        "confidence": 5,
    }
    assert parse_step(CONTEXTUAL, obj(answer="x", confidence=True), "stop").status == FAILED


def test_divergence_fallback_uses_the_two_answers() -> None:
    def trace(a: str, b: str) -> dict:
        return {CONTEXTUAL: {"fields": {"answer": a}}, PARAMETRIC: {"fields": {"answer": b}}}

    fail = "{"
    assert parse_step(DIVERGENCE, fail, "stop", trace=trace("Lyon", "Paris")).fields == {
        "diverge": True,
        "explanation": "",
    }
    # different wording of the same answer (normalize_answer), or a missing one: no divergence
    assert not parse_step(DIVERGENCE, fail, "stop", trace=trace("The Lyon.", "lyon")).fields[
        "diverge"
    ]
    assert not parse_step(DIVERGENCE, fail, "stop", trace=trace("Lyon", "")).fields["diverge"]
    assert not parse_step(DIVERGENCE, fail, "stop").fields["diverge"]  # no trace: both empty


def test_premise_parsing_checks_the_quote_against_the_context() -> None:
    found = parse_step(
        PREMISE,
        obj(passage=1, premise="the eiffel  TOWER is a\nwrought-iron"),
        "stop",
        context=CONTEXT,
    )
    assert found.status == OK and found.fields["premise_found"] is True
    made_up = parse_step(
        PREMISE, obj(passage=1, premise="The tower is in Lyon."), "stop", context=CONTEXT
    )
    assert made_up.fields["premise_found"] is False
    none = parse_step(PREMISE, obj(passage=0, premise=""), "stop", context=CONTEXT)
    assert none.fields == {"passage": 0, "premise": "", "premise_found": False}
    cut = parse_step(
        PREMISE, '{"passage": 1, "premise": "It was built for the 18', "length", context=CONTEXT
    )
    assert cut.status == REPAIRED and cut.fields["premise_found"] is True  # a prefix is a quote
    failed = parse_step(PREMISE, '{"passage": 1', "length", context=CONTEXT)
    assert failed.status == FAILED
    assert failed.fields == {"passage": None, "premise": "", "premise_found": False}
    with pytest.raises(ValueError, match="context"):
        parse_step(PREMISE, obj(passage=0, premise=""), "stop")
    assert premise_found("", CONTEXT) is False
    assert premise_found("  ", CONTEXT) is False
    assert premise_found("GUSTAVE Eiffel was", CONTEXT) is True
    assert premise_found("Gustave Eiffel was French", CONTEXT) is False
    assert found.fields["passage"] == 1


def test_parametric_from_closed_book() -> None:
    answered = parametric_from_closed_book(
        {
            "decision": "answer",
            "answer": "Paris",
            "confidence": 95,
            "parse_status": "ok",
            "raw": "r",
        }
    )
    assert (answered.status, answered.fields, answered.origin) == (
        OK,
        {"answer": "Paris", "confidence": 95},
        "closed_book",
    )
    assert answered.prompt_tokens == 0  # the CB row carries that call's cost
    abstained = parametric_from_closed_book(
        {"decision": "abstain", "answer": "no idea", "confidence": 0, "parse_status": "ok"}
    )
    assert abstained.fields == {"answer": "", "confidence": 0}
    failed = parametric_from_closed_book(
        {"decision": None, "answer": None, "confidence": None, "parse_status": "failed"}
    )
    assert (failed.status, failed.fallback, failed.fields) == (
        FAILED,
        True,
        {"answer": "", "confidence": None},
    )
    repaired = parametric_from_closed_book(
        {"decision": "answer", "answer": "Paris", "confidence": 60, "parse_status": "repaired"}
    )
    assert repaired.status == REPAIRED
    with pytest.raises(ValueError, match="decision"):
        parametric_from_closed_book({"decision": "maybe", "answer": "", "confidence": 0})


# --- the pipeline with a scripted completer ----------------------------------------------

CB_ROW = {
    "qid": "q1",
    "prompt": "CB",
    "decision": "answer",
    "answer": "Paris",
    "confidence": 95,
    "parse_status": "ok",
    "raw": "{}",
    "finish_reason": "stop",
}
SCRIPT = {
    CONTEXTUAL: obj(answer="Lyon", confidence=90),
    PARAMETRIC: obj(answer="Paris", confidence=80),
    DIVERGENCE: obj(diverge=True, explanation="Lyon and Paris are different cities."),
    PREMISE: obj(passage=1, premise=PREMISE_QUOTE),
    RESOLUTION: obj(
        decision="answer",
        answer="Paris",
        confidence=85,
        source="parametric",
        rationale="The passage misplaces the tower.",
    ),
}


class ScriptedCompleter:
    """Answers each step with its canned JSON; records which steps were called, with
    which grammar and which user message."""

    def __init__(self, script: dict[str, str], finish: str = "stop") -> None:
        self.script = script
        self.finish = finish
        self.calls: list[tuple[str, str, str]] = []

    def __call__(self, messages: list[dict[str, str]], *, grammar: str) -> dict[str, Any]:
        user = messages[-1]["content"]
        (step,) = [s for s in STEPS if STEP_INSTRUCTIONS[s] in user]
        self.calls.append((step, grammar, user))
        return {
            "raw": self.script[step],
            "finish_reason": self.finish,
            "prompt_tokens": 100,
            "completion_tokens": 10,
            "seconds": 0.5,
        }

    @property
    def steps(self) -> list[str]:
        return [step for step, _, _ in self.calls]

    def user(self, step: str) -> str:
        return next(user for s, _, user in self.calls if s == step)


class Resets:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_full_cdd_runs_every_step_and_resolves() -> None:
    complete, reset = ScriptedCompleter(SCRIPT), Resets()
    row = run_cdd(complete, reset, QUESTION, CONTEXT, CB_ROW)
    assert reset.count == 1
    # step 2 comes from the closed-book row: four calls, each under its own grammar
    assert complete.steps == [CONTEXTUAL, DIVERGENCE, PREMISE, RESOLUTION]
    assert all(grammar == STEP_GRAMMARS[step] for step, grammar, _ in complete.calls)
    assert {k: row[k] for k in ("decision", "answer", "confidence", "source", "rule")} == {
        "decision": "answer",
        "answer": "Paris",
        "confidence": 85,
        "source": "parametric",
        "rule": RESOLVED,
    }
    assert (row["variant"], row["parametric"], row["parse_status"]) == ("full", "closed_book", OK)
    assert (row["calls"], row["prompt_tokens"], row["completion_tokens"], row["seconds"]) == (
        4,
        400,
        40,
        2.0,
    )
    trace = row["trace"]
    assert list(trace) == list(STEPS)
    assert trace[PARAMETRIC]["origin"] == "closed_book"
    assert trace[PARAMETRIC]["fields"] == {"answer": "Paris", "confidence": 95}
    assert trace[PREMISE]["fields"]["premise_found"] is True
    for step in (CONTEXTUAL, DIVERGENCE, PREMISE, RESOLUTION):
        assert trace[step]["status"] == OK and trace[step]["raw"] == SCRIPT[step]
        assert trace[step]["prompt_tokens"] == 100 and trace[step]["seconds"] == 0.5
    json.dumps(row)  # a JSONL-ready row
    # what each step saw
    assert "Analysis so far" not in complete.user(CONTEXTUAL)
    divergence_prompt = complete.user(DIVERGENCE)
    assert '"Lyon" (confidence 90)' in divergence_prompt
    assert '"Paris" (confidence 95)' in divergence_prompt
    resolution = complete.user(RESOLUTION)
    assert "Lyon and Paris are different cities." in resolution
    assert f'Conflicting premise (passage 1): "{PREMISE_QUOTE}"' in resolution
    assert resolution.startswith(f"Context:\n{CONTEXT}\n\nQuestion: {QUESTION}\n\n")


def test_no_divergence_skips_the_premise_but_still_resolves() -> None:
    script = {**SCRIPT, DIVERGENCE: obj(diverge=False, explanation="Same city.")}
    complete = ScriptedCompleter(script)
    row = run_cdd(complete, Resets(), QUESTION, CONTEXT, CB_ROW)
    assert complete.steps == [CONTEXTUAL, DIVERGENCE, RESOLUTION]
    premise = row["trace"][PREMISE]
    assert (premise["status"], premise["skip_reason"], premise["fields"]) == (
        SKIPPED,
        NOT_DIVERGENT,
        {},
    )
    assert "Conflicting premise" not in complete.user(RESOLUTION)
    assert "the answers do not diverge" in complete.user(RESOLUTION)
    assert row["rule"] == RESOLVED and row["calls"] == 3


def test_no_premise_variant_never_isolates_a_premise() -> None:
    complete = ScriptedCompleter(SCRIPT)
    row = run_cdd(complete, Resets(), QUESTION, CONTEXT, CB_ROW, variant="no_premise")
    assert complete.steps == [CONTEXTUAL, DIVERGENCE, RESOLUTION]
    assert row["trace"][PREMISE]["skip_reason"] == ABLATED
    assert "Conflicting premise" not in complete.user(RESOLUTION)


def test_no_divergence_variant_always_isolates_a_premise() -> None:
    complete = ScriptedCompleter(SCRIPT)
    row = run_cdd(complete, Resets(), QUESTION, CONTEXT, CB_ROW, variant="no_divergence")
    assert complete.steps == [CONTEXTUAL, PREMISE, RESOLUTION]
    assert row["trace"][DIVERGENCE]["skip_reason"] == ABLATED
    assert "Divergence check" not in complete.user(PREMISE)
    assert "Divergence check" not in complete.user(RESOLUTION)
    assert "Conflicting premise (passage 1)" in complete.user(RESOLUTION)


def test_in_context_parametric_is_asked_without_step_one_answer() -> None:
    complete = ScriptedCompleter(SCRIPT)
    row = run_cdd(complete, Resets(), QUESTION, CONTEXT, None, parametric="in_context")
    assert complete.steps == [CONTEXTUAL, PARAMETRIC, DIVERGENCE, PREMISE, RESOLUTION]
    assert "Lyon" not in complete.user(PARAMETRIC).split("Question:")[1]
    assert row["trace"][PARAMETRIC]["fields"] == {"answer": "Paris", "confidence": 80}
    assert row["calls"] == 5


def test_step_failures_take_their_documented_fallbacks() -> None:
    script = {**SCRIPT, DIVERGENCE: "garbage", RESOLUTION: '{"decision": "ans'}
    complete = ScriptedCompleter(script, finish="length")
    row = run_cdd(complete, Resets(), QUESTION, CONTEXT, CB_ROW)
    divergence = row["trace"][DIVERGENCE]
    # Lyon vs Paris differ: the fallback says diverge, so the premise step still runs
    assert (divergence["status"], divergence["fallback"], divergence["fields"]["diverge"]) == (
        FAILED,
        True,
        True,
    )
    assert complete.steps == [CONTEXTUAL, DIVERGENCE, PREMISE, RESOLUTION]
    assert {k: row[k] for k in ("decision", "answer", "confidence", "source", "rule")} == {
        "decision": None,
        "answer": None,
        "confidence": None,
        "source": None,
        "rule": RULE_PARSE_FAILED,
    }
    assert row["parse_status"] == FAILED


def test_failed_closed_book_row_gives_no_parametric_answer() -> None:
    complete = ScriptedCompleter({**SCRIPT, DIVERGENCE: "{"})
    cb = {**CB_ROW, "decision": None, "answer": None, "confidence": None, "parse_status": "failed"}
    row = run_cdd(complete, Resets(), QUESTION, CONTEXT, cb)
    assert row["trace"][PARAMETRIC]["fallback"] is True
    assert "Parametric answer (from your own knowledge): none" in complete.user(DIVERGENCE)
    # divergence also failed: one answer is empty, so the fallback is "no divergence"
    assert row["trace"][DIVERGENCE]["fields"]["diverge"] is False
    assert row["trace"][PREMISE]["skip_reason"] == NOT_DIVERGENT


def test_run_cdd_rejects_bad_arguments() -> None:
    complete = ScriptedCompleter(SCRIPT)
    with pytest.raises(ValueError, match="closed-book row"):
        run_cdd(complete, Resets(), QUESTION, CONTEXT, None)
    with pytest.raises(ValueError, match="variant"):
        run_cdd(complete, Resets(), QUESTION, CONTEXT, CB_ROW, variant="half")
    with pytest.raises(ValueError, match="parametric source"):
        run_cdd(complete, Resets(), QUESTION, CONTEXT, CB_ROW, parametric="prior")
    with pytest.raises(ValueError, match="unknown CDD step"):
        step_messages("summary", QUESTION, CONTEXT, {})
    assert complete.calls == []


# --- CDD-alpha ---------------------------------------------------------------------------

P1_ROW = {
    "qid": "q1",
    "decision": "answer",
    "answer": "Lyon",
    "confidence": 70,
    "parse_status": "ok",
}


def test_gate_score() -> None:
    assert gate_score("Paris", "paris.") == 0.0
    assert gate_score("Paris", "Lyon") == 1.0
    assert gate_score("Paris", "") == 0.0  # no second claim: no conflict
    assert gate_score("", "Paris") == 0.0
    assert gate_score("The", "Paris") == 0.0  # empty after normalisation
    assert gate_score(None, None) == 0.0
    assert gate_score("New York City", "New York") == pytest.approx(0.2)
    # exactly on the threshold (F1 = 0.5) is high conflict; just below is not
    assert gate_score("red car", "red bus") == pytest.approx(0.5)
    assert cdd_gate.high_conflict(gate_score("red car", "red bus"))
    assert not cdd_gate.high_conflict(gate_score("red big car", "red big bus"))  # F1 2/3
    assert GATE_THRESHOLD == 0.5


def test_cdd_alpha_routes_by_the_gate() -> None:
    cdd_row = run_cdd(ScriptedCompleter(SCRIPT), Resets(), QUESTION, CONTEXT, CB_ROW)
    low = cdd_alpha_decision(P1_ROW, cdd_row, 0.49)
    assert (low["decision"], low["answer"], low["confidence"], low["rule"]) == (
        "answer",
        "Lyon",
        70,
        GATE_BYPASS,
    )
    assert (low["gated"], low["route"], low["cdd_calls"]) == (False, "standard", 1)
    assert cdd_alpha_decision(P1_ROW, None, 0.2)["cdd_calls"] is None
    high = cdd_alpha_decision(P1_ROW, cdd_row, 0.5)
    assert (high["decision"], high["answer"], high["confidence"], high["rule"]) == (
        "answer",
        "Paris",
        85,
        RESOLVED,
    )
    assert (high["gated"], high["route"], high["cdd_calls"], high["source"]) == (
        True,
        "cdd",
        4,
        "parametric",
    )
    with pytest.raises(ValueError, match="CDD row"):
        cdd_alpha_decision(P1_ROW, None, 0.9)
    failed_p1 = {
        **P1_ROW,
        "decision": None,
        "answer": None,
        "confidence": None,
        "parse_status": "failed",
    }
    bypass_failed = cdd_alpha_decision(failed_p1, None, 0.0)
    assert (bypass_failed["decision"], bypass_failed["confidence"], bypass_failed["rule"]) == (
        None,
        None,
        RULE_PARSE_FAILED,
    )
    # from the stored trace: step 1 "Lyon" vs CB "Paris" -> score 1, routed
    stored = cdd_alpha_row(P1_ROW, cdd_row)
    assert stored["gate_score"] == 1.0 and stored["gated"] and stored["answer"] == "Paris"
    agreeing = {
        **cdd_row,
        "trace": {**cdd_row["trace"], CONTEXTUAL: {"fields": {"answer": "Paris"}}},
    }
    assert cdd_alpha_row(P1_ROW, agreeing)["route"] == "standard"


OXFORD, CAMBRIDGE = "University of Oxford", "University of Cambridge"


def _judgement(contradict: bool | None, status: str = OK) -> dict[str, Any]:
    """A stored gate judgement (run_gate's entry), as data."""
    return {
        "step": cdd_schema.GATE,
        "status": status,
        "origin": "generated",
        "fields": {"contradict": contradict},
    }


def test_the_model_gate_judges_token_sharing_swaps() -> None:
    # the lexical score lets a swap that shares tokens through: F1 2/3, score 1/3 < 0.5
    assert gate_score(OXFORD, CAMBRIDGE) == pytest.approx(1 / 3)
    assert gate_route(OXFORD, CAMBRIDGE) == (False, cdd_gate.BASIS_LEXICAL)
    # the model gate asks for a judgement of that pair and follows it
    assert cdd_gate.gate_needs_judgement(OXFORD, CAMBRIDGE)
    yes, no = _judgement(True), _judgement(False)
    assert gate_route(OXFORD, CAMBRIDGE, "model", judgement=yes) == (True, "judgement")
    assert gate_route(OXFORD, CAMBRIDGE, "model", judgement=no) == (False, "judgement")
    # a judgement overrides a high lexical score too (different wording of one fact)
    assert gate_route("JFK", "John F. Kennedy", "model", judgement=no) == (False, "judgement")
    # pairs that cannot contradict are decided without a judgement
    for a, b in (("Paris", ""), ("", "Paris"), ("Paris", "paris."), ("the Paris", "Paris")):
        assert not cdd_gate.gate_needs_judgement(a, b)
        assert gate_route(a, b, "model") == (False, cdd_gate.BASIS_NO_PAIR)
    # an unparseable judgement falls back to the lexical rule
    failed = _judgement(None, FAILED)
    assert gate_route("Paris", "Lyon", "model", judgement=failed) == (True, "lexical_fallback")
    assert gate_route(OXFORD, CAMBRIDGE, "model", judgement=failed)[0] is False
    # a pair that needs a judgement but has none: the traces were made without the gate
    with pytest.raises(ValueError, match="judgement"):
        gate_route(OXFORD, CAMBRIDGE, "model")
    skipped = {"step": cdd_schema.GATE, "status": SKIPPED, "fields": {}}
    with pytest.raises(ValueError, match="judgement"):
        gate_route(OXFORD, CAMBRIDGE, "model", judgement=skipped)
    with pytest.raises(ValueError, match="unknown gate"):
        gate_route("a", "b", "nli")


def test_run_gate_asks_one_grammar_constrained_question() -> None:
    calls = []

    def complete(messages, *, grammar):
        calls.append((messages, grammar))
        return {"raw": '{"contradict": true}', "finish_reason": "stop", "prompt_tokens": 40}

    trace = {
        CONTEXTUAL: {"fields": {"answer": OXFORD}},
        PARAMETRIC: {"fields": {"answer": CAMBRIDGE}},
    }
    entry = cdd_gate.run_gate(complete, QUESTION, trace)
    assert (entry["status"], entry["fields"], entry["prompt_tokens"]) == (
        OK,
        {"contradict": True},
        40,
    )
    ((messages, grammar),) = calls
    assert grammar == cdd_schema.GATE_GRAMMAR
    assert messages[0] == {"role": "system", "content": cdd_prompts.CDD_SYSTEM}
    user = messages[1]["content"]
    assert f'"{OXFORD}"' in user and f'"{CAMBRIDGE}"' in user and QUESTION in user
    assert CONTEXT not in user  # the judgement is about the two answers alone
    pattern = grammar_regex(cdd_schema.GATE_GRAMMAR)
    assert pattern.fullmatch('{"contradict": false}') and not pattern.fullmatch('{"contradict": 1}')
    assert parse_step(cdd_schema.GATE, '{"contradict": tr', "length").fields == {"contradict": None}
    # no pair to judge: no call, a skipped entry
    empty = {CONTEXTUAL: {"fields": {"answer": ""}}, PARAMETRIC: {"fields": {"answer": "Paris"}}}
    skipped = cdd_gate.run_gate(complete, QUESTION, empty)
    assert (skipped["status"], skipped["skip_reason"], len(calls)) == (SKIPPED, NO_PAIR, 1)


# --- baselines ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["CAI", "SHAM", "REFLECT", "FILTER"])
def test_baseline_messages_are_on_equal_footing_with_cdd(name: str) -> None:
    messages = baseline_messages(name, QUESTION, CONTEXT)
    # CDD's own system message, not GRAB-RAG's "use ONLY the provided context"
    cdd_step = step_messages(CONTEXTUAL, QUESTION, CONTEXT)
    assert messages[0] == cdd_step[0] == {"role": "system", "content": cdd_prompts.CDD_SYSTEM}
    assert messages[0]["content"] != SYSTEM_CONTEXT and "ONLY" not in messages[0]["content"]
    user = messages[1]["content"]
    assert BASELINE_PROMPTS[name] in user and CONTEXT in user and QUESTION in user
    reasoning_first = name in ("REFLECT", "FILTER")
    response_format = cdd_baselines.REASONING_FIRST_FORMAT if reasoning_first else RESPONSE_FORMAT
    assert user.endswith(response_format)
    # GRAB-RAG's P1 prompt, the policy instruction swapped for the baseline's
    p1 = context_user_prompt(CONTEXT, QUESTION, "P1")
    expected = p1.replace(POLICY_INSTRUCTIONS["P1"], BASELINE_PROMPTS[name])
    assert user == expected.replace(RESPONSE_FORMAT, response_format)
    assert POLICY_INSTRUCTIONS["P1"] in BASELINE_PROMPTS[name]  # each keeps P1's clause
    grammar = cdd_baselines.baseline_grammar(name)
    assert cdd_baselines.grammar_for_messages(messages) == grammar
    assert grammar == (cdd_schema.REASONING_FIRST_GRAMMAR if reasoning_first else GBNF_GRAMMAR)
    assert cdd_schema.BASELINE_GRAMMAR == GBNF_GRAMMAR
    ok = '{"decision": "abstain", "answer": "", "confidence": 10, "reasoning": "conflict"}'
    assert parse_output(ok, "stop").status == "ok"


def test_reflect_and_filter_reason_before_they_commit() -> None:
    pattern = grammar_regex(cdd_schema.REASONING_FIRST_GRAMMAR)
    lines = cdd_schema.REASONING_FIRST_GRAMMAR.strip().splitlines()
    assert len(lines) == cdd_schema.REASONING_FIRST_GRAMMAR.count("::=")
    # reasoning first, then GRAB-RAG's three decision fields
    first = '{"reasoning": "The passage says Lyon; the tower is in Paris.", '
    raw = first + '"decision": "answer", "answer": "Paris", "confidence": 80}'
    assert pattern.fullmatch(raw)
    answer_first = '{"decision": "answer", "answer": "x", "confidence": 7, "reasoning": ""}'
    assert not pattern.fullmatch(answer_first)
    assert grammar_regex(GBNF_GRAMMAR).fullmatch(answer_first)  # CAI and SHAM keep it
    # the decision rows parse into the same schema as the answer-first ones
    parsed = parse_output(raw, "stop")
    assert (parsed.status, parsed.decision, parsed.answer, parsed.confidence) == (
        "ok",
        "answer",
        "Paris",
        80,
    )
    assert parsed.reasoning.startswith("The passage says Lyon")
    shared = set(GBNF_GRAMMAR.splitlines()[1:])
    assert set(cdd_schema.REASONING_FIRST_GRAMMAR.splitlines()[1:]) == shared
    fmt = cdd_baselines.REASONING_FIRST_FORMAT
    assert fmt.index('"reasoning"') < fmt.index('"decision"') < fmt.index('"confidence"')
    for name in ("REFLECT", "FILTER"):
        assert "before the decision" in BASELINE_PROMPTS[name]


def test_a_cut_confidence_of_a_reasoning_first_baseline_is_not_trusted() -> None:
    head = '{"reasoning": "r", "decision": "answer", "answer": "Paris", "confidence": 8'
    rows = []
    for qid, raw in (("cut", head), ("closed", head + "5 ")):
        parsed = parse_output(raw, "length")  # GRAB-RAG's parser repairs both with "}"
        assert parsed.status == "repaired"
        rows.append(
            {
                "qid": qid,
                "prompt": "REFLECT",
                "decision": parsed.decision,
                "answer": parsed.answer,
                "confidence": parsed.confidence,
                "parse_status": parsed.status,
                "raw": raw,
            }
        )
    cut, closed = cdd_decide.baseline_decisions(rows, "REFLECT")
    assert (cut["rule"], cut["decision"], cut["confidence"]) == ("parse_failed", None, None)
    assert (closed["rule"], closed["confidence"]) == ("generated", 85)
    # answer-first baselines end with the reasoning: their repair is GRAB-RAG's
    cai = [{**rows[0], "prompt": "CAI"}]
    assert cdd_decide.baseline_decisions(cai, "CAI")[0]["rule"] == "generated"


def test_conflict_aware_baseline_answers_from_knowledge_on_a_contradiction() -> None:
    cai = BASELINE_PROMPTS["CAI"]
    assert "Trust the context unless it conflicts with well-established" in cai
    assert "give the answer from that knowledge instead" in cai
    # the abstention clause (P1's) is for missing information, not for a contradiction
    assert cai.index("from that knowledge") < cai.index(POLICY_INSTRUCTIONS["P1"])


def test_unknown_baseline() -> None:
    with pytest.raises(ValueError, match="unknown baseline"):
        baseline_messages("P9", QUESTION, CONTEXT)


def test_sham_is_length_matched_and_content_free() -> None:
    sham = BASELINE_PROMPTS["SHAM"]
    target = word_count(" ".join(STEP_INSTRUCTIONS[s] for s in STEPS))
    assert target == cdd_baselines.CDD_INSTRUCTION_WORDS
    assert abs(word_count(sham) - target) <= 0.1 * target
    assert within_length(sham)
    banned = ["conflict", "knowledge", "premise", "diverge", "contradict", "reliab"]
    banned += ["plausib", "trust", "critique", "mistake", "parametric", "verify"]
    assert not [word for word in banned if word in sham.lower()]
    assert "Step 1:" in sham


def test_length_helpers() -> None:
    assert within_length("a " * 90, 100) and within_length("a " * 110, 100)
    assert not within_length("a " * 89, 100) and not within_length("a " * 111, 100)
    padded = length_matched("Head.", ["one two three."], "Tail.", target_words=50)
    assert padded.startswith("Head.\nStep 1: one two three.\nStep 2:") and padded.endswith("Tail.")
    assert 45 <= word_count(padded) <= 50
    with pytest.raises(ValueError, match="not within"):
        length_matched("word " * 80, ["x."], "", target_words=50)
    with pytest.raises(ValueError, match="filler"):
        length_matched("Head.", [], "Tail.", target_words=50)


# --- diagnostics -------------------------------------------------------------------------


def test_truncate_trace_drops_the_conflict_analysis() -> None:
    row = run_cdd(ScriptedCompleter(SCRIPT), Resets(), QUESTION, CONTEXT, CB_ROW)
    before = json.dumps(row["trace"], sort_keys=True)
    truncated = truncate_trace(row["trace"])
    assert json.dumps(row["trace"], sort_keys=True) == before  # not mutated
    assert list(truncated) == [CONTEXTUAL, PARAMETRIC, DIVERGENCE, PREMISE]  # no resolution
    assert truncated[CONTEXTUAL] == row["trace"][CONTEXTUAL]
    assert truncated[DIVERGENCE]["skip_reason"] == TRUNCATED
    assert truncated[PREMISE]["skip_reason"] == TRUNCATED
    user = resolution_messages(QUESTION, CONTEXT, truncated)[1]["content"]
    assert '"Lyon"' in user and '"Paris"' in user
    assert "Divergence check" not in user and "Conflicting premise" not in user
    assert STEP_INSTRUCTIONS[RESOLUTION] in user


def test_inject_mistake_replaces_the_divergence_conclusion() -> None:
    row = run_cdd(ScriptedCompleter(SCRIPT), Resets(), QUESTION, CONTEXT, CB_ROW)
    injected = inject_mistake(row["trace"], "Marseille")
    assert RESOLUTION not in injected
    assert injected[DIVERGENCE]["status"] == "injected"
    assert injected[DIVERGENCE]["fields"]["diverge"] is True
    assert injected[PREMISE] == row["trace"][PREMISE]
    assert (
        row["trace"][DIVERGENCE]["fields"]["explanation"] == "Lyon and Paris are different cities."
    )
    user = resolution_messages(QUESTION, CONTEXT, injected)[1]["content"]
    assert "the correct answer is Marseille. Give Marseille as the final answer." in user
    assert "Lyon and Paris are different cities." not in user
    # the rerun: the scripted model follows the injected directive
    follow = obj(
        decision="answer", answer="Marseille", confidence=60, source="neither", rationale=""
    )
    complete = ScriptedCompleter({RESOLUTION: follow})
    rerun = rerun_resolution(complete, QUESTION, CONTEXT, injected)
    assert complete.steps == [RESOLUTION]
    assert (rerun["answer"], rerun["rule"], rerun["resolution"]["status"]) == (
        "Marseille",
        RESOLVED,
        OK,
    )
    with pytest.raises(ValueError, match="empty"):
        inject_mistake(row["trace"], " ")
    ablated = run_cdd(
        ScriptedCompleter(SCRIPT), Resets(), QUESTION, CONTEXT, CB_ROW, variant="no_divergence"
    )
    with pytest.raises(ValueError, match="divergence step"):
        inject_mistake(ablated["trace"], "Marseille")


MISTAKE_CASES = [
    # (contextual, parametric, injected) -> verdict, claim: QC (the planted answer is step 1)
    ("Lyon", "Paris", "Lyon", True, "The contextual answer is correct and the parametric"),
    ("Lyon", "Paris", "paris", True, "The parametric answer is correct and the contextual"),
    ("Lyon", "Paris", "Marseille", True, "Both answers are mistaken: the correct answer is"),
    # Q0: the passages give no answer
    ("", "Paris", "Marseille", False, "The parametric answer is mistaken: the correct"),
    ("", "Paris", "Paris", False, "The parametric answer is correct: the answer is Paris."),
    ("", "", "Atlantis", False, "Neither answer is given, but the correct answer is"),
    # Q100: the two answers agree
    ("Paris", "the Paris", "Atlantis", False, "Both answers are mistaken: the correct"),
    ("Lyon", "Lyon", "Lyon", False, "Both answers are correct: the answer is Lyon."),
    # the model does not know
    ("Lyon", "", "Lyon", False, "The contextual answer is correct: the answer is Lyon."),
    ("Lyon", "", "Atlantis", False, "The contextual answer is mistaken: the correct"),
]


@pytest.mark.parametrize(("contextual", "parametric", "wrong", "verdict", "claim"), MISTAKE_CASES)
def test_the_injected_mistake_never_contradicts_the_trace(
    contextual: str, parametric: str, wrong: str, verdict: bool, claim: str
) -> None:
    trace = run_cdd(ScriptedCompleter(SCRIPT), Resets(), QUESTION, CONTEXT, CB_ROW)["trace"]
    trace[CONTEXTUAL]["fields"]["answer"] = contextual
    trace[PARAMETRIC]["fields"]["answer"] = parametric
    injected = inject_mistake(trace, wrong)[DIVERGENCE]["fields"]
    assert injected["diverge"] is verdict  # the verdict the two shown answers support
    text = injected["explanation"]
    assert text.startswith(claim) and text.endswith(f"Give {wrong} as the final answer.")
    user = resolution_messages(QUESTION, CONTEXT, inject_mistake(trace, wrong))[1]["content"]
    assert ("the answers diverge." if verdict else "the answers do not diverge.") in user


def test_the_injected_mistake_is_consistent_for_every_pair_of_answers() -> None:
    norm = normalize_answer
    for contextual in ("", "Lyon", "Paris"):
        for parametric in ("", "Lyon", "Paris"):
            for wrong in ("Lyon", "Paris", "Atlantis"):
                text = cdd_trace.mistake_explanation(contextual, parametric, wrong)
                for label, answer in (("contextual", contextual), ("parametric", parametric)):
                    mistaken = f"The {label} answer is mistaken" in text or (
                        f"and the {label} answer is mistaken" in text
                    )
                    said_correct = f"The {label} answer is correct" in text
                    # an answer is called mistaken only when it is given and differs
                    assert not mistaken or (answer and norm(answer) != norm(wrong)), text
                    assert not said_correct or norm(answer) == norm(wrong), text
                if text.startswith("Both"):
                    assert contextual and parametric, text
                if text.startswith("Both answers are mistaken"):
                    assert norm(wrong) not in (norm(contextual), norm(parametric)), text
                assert len(text) <= len(cdd_trace.longest_mistake_explanation(wrong))


def test_causal_sensitivity() -> None:
    assert causal_sensitivity(8 / 10, 4 / 10).value == pytest.approx(0.5)
    assert causal_sensitivity(8 / 10, 4 / 10).reason is None
    assert float(causal_sensitivity(0.5, 0.6)) == pytest.approx(-0.2)  # not clipped
    undefined = causal_sensitivity(0.0, 0.0)
    assert math.isnan(undefined.value) and "clean accuracy is 0" in undefined.reason
    with pytest.raises(ValueError, match="acc_clean"):
        causal_sensitivity(1.5, 0.2)


def test_sensitivity_bootstrap_is_paired_deterministic_and_covers_the_point() -> None:
    clean = np.array([True] * 8 + [False] * 2)
    corrupted = np.array([True] * 4 + [False] * 6)
    value, low, high = sensitivity_bootstrap(clean, corrupted, n_resamples=2000, seed=7)
    assert value == pytest.approx(0.5)
    assert low <= value <= high and low < high
    assert sensitivity_bootstrap(clean, corrupted, n_resamples=2000, seed=7) == (value, low, high)
    # the same numbers as a plain loop over the same question draws (paired resampling)
    draws = np.random.default_rng(7).integers(0, 10, size=(2000, 10))
    stats = []
    for idx in draws:
        c, k = clean[idx].sum(), corrupted[idx].sum()
        if c:
            stats.append((c - k) / c)
    assert np.percentile(stats, [2.5, 97.5]) == pytest.approx([low, high])
    # 0/1 integers work too; no correct clean answer: NaN throughout
    assert sensitivity_bootstrap([1, 0, 1], [1, 0, 0], n_resamples=50, seed=1)[0] == 0.5
    assert all(math.isnan(x) for x in sensitivity_bootstrap([0, 0], [0, 1], n_resamples=50))
    with pytest.raises(ValueError, match="questions"):
        sensitivity_bootstrap([1, 0], [1], n_resamples=10)
    with pytest.raises(ValueError, match="bool"):
        sensitivity_bootstrap([2, 0], [1, 0], n_resamples=10)


def test_source_control() -> None:
    assert source_control("Lyon", "lyon.", "Paris") == "context"
    assert source_control("The Paris", "Lyon", "paris") == "parametric"
    assert source_control("Paris", "Paris", "Paris") == "both"
    assert source_control("Marseille", "Lyon", "Paris") == "neither"
    assert source_control(None, "Lyon", "Paris") == "neither"  # abstained / failed
    assert source_control("", "", "") == "neither"  # empty answers never match
    # exact match, not F1: a sub-entity swap shares tokens but is a different source
    assert source_control("University of Oxford", "University of Cambridge", "Oxford") == "neither"
    row = run_cdd(ScriptedCompleter(SCRIPT), Resets(), QUESTION, CONTEXT, CB_ROW)
    assert cdd_trace.row_source_control(row) == "parametric"
    assert cdd_trace.row_source_control({**row, "decision": "abstain"}) == "neither"


@pytest.mark.parametrize(
    ("condition", "tier", "expected"),
    [
        ("QC", "3", "entity_swap"),
        ("QC", "4", "entity_swap"),
        ("QC", 4, "entity_swap"),
        ("QC", "1", "temporal_shift"),
        ("QC", "1b", "temporal_shift"),
        ("QC", "2", "numeric"),
        ("Q50", None, "distractor"),  # the answer is present among distractors
        ("Q50", "3", "distractor"),  # the tier is read only for QC
        ("Q0", None, "no_answer"),  # no answer at all: no counterpart in the paper
        ("QX", None, "inter_context"),
        ("Q100", None, "clean"),
    ],
)
def test_perturbation_type(condition: str, tier: Any, expected: str) -> None:
    assert perturbation_type(condition, tier) == expected


def test_the_macro_averages_only_the_papers_types() -> None:
    assert PAPER_TYPES == ("entity_swap", "temporal_shift", "distractor")
    assert cdd_diag.ADVERSARIAL_TYPES == PAPER_TYPES
    assert set(OTHER_TYPES) == {"numeric", "inter_context", "no_answer"}
    assert set(cdd_diag.PERTURBATION_TYPES) == {"clean", *PAPER_TYPES, *OTHER_TYPES}
    assert CDD_TYPES == cdd_diag.PERTURBATION_TYPES


def test_perturbation_type_rejects_unknown_inputs() -> None:
    with pytest.raises(ValueError, match="tier"):
        perturbation_type("QC", "5")
    with pytest.raises(ValueError, match="tier"):
        perturbation_type("QC")
    with pytest.raises(ValueError, match="condition"):
        perturbation_type("Qclosed")


# === the workflow layer (grabrag.cdd.runs) =================================================

from grabrag.cdd import decisions as cdd_decide  # noqa: E402
from grabrag.cdd import diagnostics as cdd_diag  # noqa: E402
from grabrag.cdd import runs as cdd_runs  # noqa: E402
from grabrag.core.errors import DataError  # noqa: E402
from grabrag.generation.generator import run_cells  # noqa: E402

CONTEXT_ROW = {
    "qid": "q1",
    "index": 0,
    "condition": "QC",
    "question": QUESTION,
    "context": CONTEXT,
    "answers": ["Paris"],
    "replacement": "Lyon",
    "tier": "3",
}
TRUNCATED_ANSWER = obj(
    decision="answer", answer="Lyon", confidence=60, source="context", rationale="As stated."
)
MISTAKE_ANSWER = obj(
    decision="answer", answer="Lyon", confidence=99, source="neither", rationale="As told."
)


class StepCompleter:
    """Answers each CDD step from a script; step 5 answers differently when it sees a
    truncated trace (no divergence line, no premise line) or an injected mistake. Counts
    the calls it really makes."""

    def __init__(self, script: dict[str, str] | None = None) -> None:
        self.script = dict(script or SCRIPT)
        self.calls: list[str] = []

    def __call__(self, messages: list[dict[str, str]], *, grammar: str) -> dict[str, Any]:
        user = messages[-1]["content"]
        if cdd_gate.GATE_INSTRUCTION in user:
            assert grammar == cdd_schema.GATE_GRAMMAR
            (step,) = [cdd_schema.GATE]
        else:
            (step,) = [s for s in STEPS if STEP_INSTRUCTIONS[s] in user]
        self.calls.append(step)
        raw = self.script[step]
        if step == RESOLUTION and "as the final answer." in user:
            raw = MISTAKE_ANSWER
        elif step == RESOLUTION and "Divergence check" not in user and "premise" not in user:
            raw = TRUNCATED_ANSWER
        return {
            "raw": raw,
            "finish_reason": "stop",
            "prompt_tokens": 100,
            "completion_tokens": 10,
            "seconds": 0.25,
        }


def test_reusing_completer_runs_each_distinct_call_once() -> None:
    seen = []

    def complete(messages, *, grammar):
        seen.append(grammar)
        return {"raw": "{}", "seconds": 1.5}

    reusing = cdd_runs.ReusingCompleter(complete)
    message = [{"role": "user", "content": "x"}]
    assert reusing(message, grammar="g")["seconds"] == 1.5
    assert reusing(message, grammar="g") == {"raw": "{}", "seconds": 0.0}
    reusing(message, grammar="h")  # another grammar is another call
    assert (seen, reusing.executed, reusing.reused) == (["g", "h"], 2, 1)
    reusing.clear()
    reusing(message, grammar="g")
    assert (len(seen), reusing.executed, reusing.reused) == (3, 1, 0)


def test_cdd_question_runs_variants_and_perturbations_reusing_identical_calls() -> None:
    complete, reset = StepCompleter(), Resets()
    row = cdd_runs.cdd_question(complete, reset, CONTEXT_ROW, CB_ROW)
    assert reset.count == 1  # one reset per question, the calls share the prefix
    # full: 1, 3, 4, 5; no_premise: 5 (1 and 3 reused); no_divergence: 4, 5 (1 reused);
    # truncated and mistake: 5 each
    assert complete.calls == [
        CONTEXTUAL,
        DIVERGENCE,
        PREMISE,
        RESOLUTION,
        RESOLUTION,
        PREMISE,
        RESOLUTION,
        RESOLUTION,
        RESOLUTION,
    ]
    assert (row["llm_calls"], row["reused_calls"]) == (9, 3)
    assert (row["qid"], row["index"], row["condition"]) == ("q1", 0, "QC")
    assert (row["decision"], row["answer"], row["rule"], row["calls"]) == (
        "answer",
        "Paris",
        RESOLVED,
        4,
    )
    no_premise = row["ablations"]["no_premise"]
    assert no_premise["trace"][PREMISE]["skip_reason"] == ABLATED
    assert no_premise["trace"][CONTEXTUAL]["seconds"] == 0.0  # reused: no time spent
    assert no_premise["calls"] == 3  # what the variant costs on its own
    no_divergence = row["ablations"]["no_divergence"]
    assert no_divergence["trace"][DIVERGENCE]["status"] == SKIPPED
    assert no_divergence["trace"][PREMISE]["status"] == OK
    truncated = row["perturbations"]["truncated"]
    assert (truncated["decision"], truncated["answer"]) == ("answer", "Lyon")
    mistake = row["perturbations"]["mistake"]
    assert (mistake["wrong_answer"], mistake["wrong_answer_source"]) == ("Lyon", "replacement")
    assert mistake["confidence"] == 99 and mistake["resolution"]["status"] == OK
    assert row["diagnostics"] is True
    json.dumps(row)


def test_cdd_question_without_divergence_reuses_the_no_premise_run_whole() -> None:
    script = {**SCRIPT, DIVERGENCE: obj(diverge=False, explanation="Same.")}
    complete = StepCompleter(script)
    row = cdd_runs.cdd_question(complete, Resets(), CONTEXT_ROW, CB_ROW)
    # full 1, 3, 5; no_premise all reused; no_divergence 4, 5; truncated 5; mistake 5
    assert (row["llm_calls"], row["reused_calls"]) == (7, 4)
    assert row["ablations"]["no_premise"]["decision"] == row["decision"]


def test_cdd_question_without_diagnostics_and_with_in_context_prior() -> None:
    complete = StepCompleter()
    row = cdd_runs.cdd_question(
        complete, Resets(), CONTEXT_ROW, None, parametric="in_context", diagnostics=False
    )
    assert complete.calls == [CONTEXTUAL, PARAMETRIC, DIVERGENCE, PREMISE, RESOLUTION]
    assert "ablations" not in row and "perturbations" not in row
    assert (row["diagnostics"], row["llm_calls"], row["parametric"]) == (False, 5, "in_context")


def test_cdd_question_runs_the_model_gate_last_and_stores_it() -> None:
    complete = StepCompleter({**SCRIPT, cdd_schema.GATE: obj(contradict=True)})
    row = cdd_runs.cdd_question(complete, Resets(), CONTEXT_ROW, CB_ROW, gate="model")
    # the nine calls of the lexical run, then the judgement: Lyon (step 1) vs Paris (CB)
    assert complete.calls[-1] == cdd_schema.GATE and complete.calls.count(cdd_schema.GATE) == 1
    assert (row["llm_calls"], row["reused_calls"], row["gate"]) == (10, 3, "model")
    assert row["gate_judgement"]["fields"] == {"contradict": True}
    lexical = cdd_runs.cdd_question(StepCompleter(), Resets(), CONTEXT_ROW, CB_ROW)
    assert "gate_judgement" not in lexical and lexical["gate"] == "lexical"
    # an empty step-1 answer (Q0): nothing to judge, no call
    q0 = {**SCRIPT, CONTEXTUAL: obj(answer="", confidence=0), cdd_schema.GATE: "unused"}
    complete = StepCompleter(q0)
    row = cdd_runs.cdd_question(complete, Resets(), CONTEXT_ROW, CB_ROW, gate="model")
    assert cdd_schema.GATE not in complete.calls and row["gate_judgement"]["status"] == SKIPPED
    with pytest.raises(ValueError, match="unknown gate"):
        cdd_runs.cdd_question(complete, Resets(), CONTEXT_ROW, CB_ROW, gate="nli")


def test_cdd_question_never_crashes_on_unparseable_output() -> None:
    script = {step: "not json" for step in STEPS}
    row = cdd_runs.cdd_question(StepCompleter(script), Resets(), CONTEXT_ROW, CB_ROW)
    assert (row["decision"], row["rule"]) == (None, RULE_PARSE_FAILED)
    statuses = {step: entry["status"] for step, entry in row["trace"].items()}
    assert statuses[CONTEXTUAL] == FAILED and statuses[RESOLUTION] == FAILED
    assert set(statuses.values()) <= set(cdd_runs.STEP_STATUSES)
    # no answer for the divergence fallback: no divergence, premise skipped
    assert statuses[PREMISE] == SKIPPED
    assert row["ablations"]["no_divergence"]["rule"] == RULE_PARSE_FAILED


def test_wrong_answer_prefers_the_planted_replacement_and_skips_gold() -> None:
    trace = {PARAMETRIC: {"fields": {"answer": "Marseille"}}}
    assert cdd_runs.wrong_answer(CONTEXT_ROW, trace) == ("Lyon", "replacement")
    q0 = {"answers": ["Paris"]}
    assert cdd_runs.wrong_answer(q0, trace) == ("Marseille", "parametric_answer")
    correct_prior = {PARAMETRIC: {"fields": {"answer": "paris."}}}
    assert cdd_runs.wrong_answer(q0, correct_prior) == ("Atlantis", "fixed")
    assert cdd_runs.wrong_answer({**CONTEXT_ROW, "replacement": "Paris"}, {}) == (
        "Atlantis",
        "fixed",
    )


def _rows(n: int) -> list[dict[str, Any]]:
    return [{**CONTEXT_ROW, "qid": f"q{i}", "index": i} for i in range(n)]


def _cb(n: int) -> list[dict[str, Any]]:
    return [{**CB_ROW, "qid": f"q{i}"} for i in range(n)]


def _without_timing(rows: list[dict[str, Any]]) -> str:
    return re.sub(r'"(question_)?seconds": [0-9.]+', "", json.dumps(rows, sort_keys=True))


def test_run_traces_resumes_after_a_kill_and_matches_an_uninterrupted_run(tmp_path) -> None:
    lines: list[str] = []
    reference = cdd_runs.run_traces(
        StepCompleter(), Resets(), _rows(3), _cb(3), tmp_path / "a.jsonl", log=lines.append
    )
    assert [r["qid"] for r in reference] == ["q0", "q1", "q2"]
    assert len(lines) == 3 and "9 LLM calls (3 reused)" in lines[0] and "ETA" in lines[0]

    class Killed(Exception):
        pass

    class Dies(StepCompleter):
        def __call__(self, messages, *, grammar):
            if len(self.calls) == 11:  # question 0 done (9 calls), question 1 in flight
                raise Killed
            return super().__call__(messages, grammar=grammar)

    checkpoint = tmp_path / "b.jsonl"
    with pytest.raises(Killed):
        cdd_runs.run_traces(Dies(), Resets(), _rows(3), _cb(3), checkpoint, fingerprint="f")
    assert len(checkpoint.read_text().splitlines()) == 1
    with checkpoint.open("a") as handle:
        handle.write('{"qid": "q1", "torn')  # a write cut by the kill
    resumed_completer, lines = StepCompleter(), []
    resumed = cdd_runs.run_traces(
        resumed_completer, Resets(), _rows(3), _cb(3), checkpoint, fingerprint="f", log=lines.append
    )
    assert len(resumed_completer.calls) == 18  # questions 1 and 2 only
    assert lines[0].endswith("q0 (from checkpoint)")
    assert _without_timing(resumed) == _without_timing(reference)
    assert all(json.loads(line) for line in checkpoint.read_text().splitlines())
    # another fingerprint (other settings): nothing is reused
    again = StepCompleter()
    cdd_runs.run_traces(again, Resets(), _rows(3), _cb(3), checkpoint, fingerprint="g")
    assert len(again.calls) == 27


def test_run_traces_needs_every_closed_book_row(tmp_path) -> None:
    with pytest.raises(DataError, match="no closed-book"):
        cdd_runs.run_traces(StepCompleter(), Resets(), _rows(2), _cb(1), tmp_path / "c.jsonl")
    rows = cdd_runs.run_traces(
        StepCompleter(), Resets(), _rows(1), None, tmp_path / "d.jsonl", parametric="in_context"
    )
    assert rows[0]["parametric"] == "in_context"


def test_preflight_calls_bound_the_longest_step_five_prompt() -> None:
    long_cb = {**CB_ROW, "qid": "q0", "answer": "a very long closed book answer " * 10}
    ((label, messages),) = cdd_runs.preflight_calls(_rows(1), [long_cb], 64)
    assert "q0" in label and STEP_INSTRUCTIONS[RESOLUTION] in messages[-1]["content"]
    user = messages[-1]["content"]
    assert user.count("word") >= 3 * 64  # contextual answer, explanation, premise
    assert cdd_trace.longest_mistake_explanation("a very long closed book answer " * 10) in user
    real = cdd_runs.cdd_question(StepCompleter(), Resets(), _rows(1)[0], long_cb)
    longest_real = max(
        len(json.dumps(step_messages(RESOLUTION, QUESTION, CONTEXT, real["trace"]))) for _ in (0,)
    )
    assert len(json.dumps(messages)) > longest_real


def test_run_cells_takes_a_message_builder_for_the_baselines(tmp_path) -> None:
    seen = []

    def complete(messages):
        seen.append(messages)
        raw = '{"decision": "abstain", "answer": "", "confidence": 10, "reasoning": "r"}'
        return {
            "raw": raw,
            "finish_reason": "stop",
            "prompt_tokens": 5,
            "completion_tokens": 5,
            "seconds": 0.1,
        }

    rows = [{**CONTEXT_ROW, "qid": "a"}, {**CONTEXT_ROW, "qid": "b"}]
    cells = run_cells(
        complete,
        lambda: None,
        rows,
        list(BASELINE_PROMPTS),
        tmp_path / "ck.jsonl",
        messages=baseline_messages,
    )
    assert seen[0] == baseline_messages("CAI", QUESTION, CONTEXT)
    assert seen[3] == baseline_messages("FILTER", QUESTION, CONTEXT)
    assert [r["prompt"] for r in cells["SHAM"]] == ["SHAM", "SHAM"]
    assert cells["REFLECT"][0]["decision"] == "abstain"
    assert cdd_decide.baseline_decisions(cells["CAI"], "CAI")[0]["rule"] == "generated"


# --- decision rows -----------------------------------------------------------------------


def _trace_rows() -> list[dict[str, Any]]:
    first = cdd_runs.cdd_question(StepCompleter(), Resets(), _rows(2)[0], _cb(1)[0])
    failed = cdd_runs.cdd_question(
        StepCompleter({**SCRIPT, RESOLUTION: "{broken"}), Resets(), _rows(2)[1], _cb(2)[1]
    )
    return [first, failed]


def test_cdd_decisions() -> None:
    rows = cdd_decide.cdd_decisions(_trace_rows())
    assert rows[0] == {
        "qid": "q0",
        "index": 0,
        "condition": "QC",
        "policy": "CDD",
        "decision": "answer",
        "answer": "Paris",
        "confidence": 85,
        "rule": RESOLVED,
        "source": "parametric",
        "parse_status": OK,
        "llm_calls": 4,
    }
    assert (rows[1]["decision"], rows[1]["answer"], rows[1]["confidence"]) == (None, None, None)
    assert (rows[1]["rule"], rows[1]["parse_status"]) == (RULE_PARSE_FAILED, FAILED)
    with pytest.raises(DataError, match="more than once"):
        cdd_decide.cdd_decisions(_trace_rows()[:1] * 2)


def test_cdd_alpha_decisions_keep_p1_for_low_conflict_questions() -> None:
    traces = _trace_rows()
    # q1's step 1 agrees with its CB answer: no conflict, P1's row stands
    traces[1]["trace"][CONTEXTUAL]["fields"]["answer"] = "Paris"
    p1 = [
        {**P1_ROW, "qid": "q0", "index": 0, "condition": "QC", "prompt": "P1"},
        {**P1_ROW, "qid": "q1", "index": 1, "condition": "QC", "prompt": "P1", "answer": "Nice"},
    ]
    rows = cdd_decide.cdd_alpha_decisions(p1, traces)
    assert (rows[0]["decision"], rows[0]["answer"], rows[0]["rule"], rows[0]["gated"]) == (
        "answer",
        "Paris",
        RESOLVED,
        True,
    )
    assert (rows[1]["answer"], rows[1]["confidence"], rows[1]["rule"], rows[1]["gated"]) == (
        "Nice",
        70,
        GATE_BYPASS,
        False,
    )
    assert rows[1]["policy"] == "CDD_ALPHA" and rows[1]["llm_calls"] == 1
    # a threshold above every score bypasses everything
    assert not any(r["gated"] for r in cdd_decide.cdd_alpha_decisions(p1, traces, 1.01))
    # CDD run on the first question only (cdd.n_questions): CDD-alpha decides that one
    assert [r["qid"] for r in cdd_decide.cdd_alpha_decisions(p1, traces[:1])] == [p1[0]["qid"]]
    with pytest.raises(DataError, match="no CDD trace row.*of the first 1 of 2 questions"):
        cdd_decide.cdd_alpha_decisions(p1, traces[1:])
    with pytest.raises(DataError, match="wrong generation file"):
        cdd_decide.cdd_alpha_decisions([{**p1[0], "prompt": "P0"}], traces)


def test_cdd_alpha_with_the_model_gate_reads_the_stored_judgement() -> None:
    traces = _trace_rows()
    for row, answer in zip(traces, (OXFORD, "Paris"), strict=True):
        row["trace"][CONTEXTUAL]["fields"]["answer"] = answer
        row["trace"][PARAMETRIC]["fields"]["answer"] = CAMBRIDGE if answer == OXFORD else "Paris"
    traces[0]["gate_judgement"] = _judgement(True)  # Oxford vs Cambridge: judged
    traces[1]["gate_judgement"] = {"step": cdd_schema.GATE, "status": SKIPPED, "origin": "not_run"}
    p1 = [{**P1_ROW, "qid": q, "prompt": "P1"} for q in ("q0", "q1")]
    model = cdd_decide.cdd_alpha_decisions(p1, traces, gate="model")
    assert (model[0]["gated"], model[0]["gate"], model[0]["gate_basis"]) == (
        True,
        "model",
        "judgement",
    )
    assert model[0]["gate_score"] == pytest.approx(1 / 3)  # the lexical gate would bypass
    assert model[0]["llm_calls"] == 4 + 1  # the decomposition plus the judgement
    assert (model[1]["gated"], model[1]["gate_basis"], model[1]["llm_calls"]) == (
        False,
        "no_pair",
        1,
    )
    lexical = cdd_decide.cdd_alpha_decisions(p1, traces)
    assert [r["gated"] for r in lexical] == [False, False]
    assert lexical[0]["gate"] == "lexical" and lexical[0]["llm_calls"] == 1
    # a judgement the model gate needs but the traces lack
    del traces[0]["gate_judgement"]
    with pytest.raises(DataError, match="cdd.gate: model"):
        cdd_decide.cdd_alpha_decisions(p1, traces, gate="model")
    from grabrag.core.registry import decide

    traces[0]["gate_judgement"] = _judgement(False)
    decided = decide("CDD_ALPHA", {"P1": p1, "CDD": traces}, {"gate": "model"})
    assert [r["rule"] for r in decided] == [GATE_BYPASS, GATE_BYPASS]


def test_baseline_decisions() -> None:
    rows = [
        {"qid": "a", "prompt": "SHAM", "decision": "answer", "answer": "x", "confidence": 5},
        {"qid": "b", "prompt": "SHAM", "decision": None, "parse_status": "failed"},
    ]
    out = cdd_decide.baseline_decisions(rows, "SHAM")
    assert [(r["decision"], r["confidence"], r["rule"]) for r in out] == [
        ("answer", 5, "generated"),
        (None, None, "parse_failed"),
    ]
    with pytest.raises(DataError, match="wrong generation file"):
        cdd_decide.baseline_decisions(rows, "CAI")
    with pytest.raises(ValueError, match="not a baseline"):
        cdd_decide.baseline_decisions(rows, "P1")


def test_policies_decide_dispatches_the_cdd_family() -> None:
    from grabrag.core import registry
    from grabrag.core.registry import decide

    assert registry.names()[-6:] == ["CDD", "CDD_ALPHA", "CAI", "SHAM", "REFLECT", "FILTER"]
    assert registry.policy("CDD_ALPHA").inputs == {
        "P1": registry.GENERATION,
        "CDD": registry.CDD_TRACES,
    }
    traces = _trace_rows()
    assert decide("CDD", {"CDD": traces})[0]["policy"] == "CDD"
    p1 = [{**P1_ROW, "qid": q} for q in ("q0", "q1")]
    gated = decide("CDD_ALPHA", {"P1": p1, "CDD": traces}, {"gate_threshold": 1.01})
    assert [r["rule"] for r in gated] == [GATE_BYPASS, GATE_BYPASS]
    cai = [{"qid": "a", "prompt": "CAI", "decision": "abstain", "answer": "", "confidence": 3}]
    assert decide("CAI", {"CAI": cai})[0]["rule"] == "generated"
    with pytest.raises(ValueError, match="needs inputs"):
        decide("CDD_ALPHA", {"CDD": traces})


# --- diagnostics -------------------------------------------------------------------------


def test_accuracy_is_the_papers_answer_accuracy_and_behaviour_is_grabrags() -> None:
    answer = {"decision": "answer", "answer": "the Paris"}
    abstain = {"decision": "abstain", "answer": ""}
    failed = {"decision": None, "answer": None}
    # accuracy: the final answer matches a gold alias, at every condition
    assert cdd_diag.correct(answer, ["Paris"]) and not cdd_diag.correct(answer, ["Lyon"])
    assert not cdd_diag.correct(abstain, ["Paris"]) and not cdd_diag.correct(abstain, [])
    assert not cdd_diag.correct(failed, ["Paris"]) and not cdd_diag.correct(None, ["Paris"])
    # behaviour: an EM-correct answer at Q100/Q50, an abstention at Q0/QC/QX
    behaviour = cdd_diag.behaviour_correct
    assert behaviour(answer, "Q100", ["Paris"]) and not behaviour(answer, "Q50", ["Lyon"])
    assert not behaviour(abstain, "Q100", ["Paris"])
    assert behaviour(abstain, "QC", ["Paris"]) and behaviour(abstain, "QX", [])
    assert not behaviour(answer, "QC", ["Paris"])  # recovering the truth is accuracy only
    assert not behaviour(failed, "Q0", []) and not behaviour(None, "Q100", ["x"])
    with pytest.raises(ValueError, match="condition"):
        behaviour(answer, "Qclosed", [])


def test_an_always_abstaining_policy_has_cdd_accuracy_zero() -> None:
    conditions = ["Q100", "Q50", "Q0", "QC", "QX"]
    tiers = ["3", "4", "1", "1b", "2"]
    contexts = {c: [{"qid": f"{c}{i}", "answers": ["Paris"]} for i in range(5)] for c in conditions}
    contexts["QC"] = [
        {**row, "tier": tier} for row, tier in zip(contexts["QC"], tiers, strict=True)
    ]
    abstain = {
        (c, "ABSTAIN"): [
            {"qid": r["qid"], "decision": "abstain", "answer": ""} for r in contexts[c]
        ]
        for c in conditions
    }
    rows = cdd_diag.diagnostics("m", "d", conditions, contexts, None, abstain, n_resamples=50)
    accuracy = [r for r in rows if r["metric"] == "accuracy"]
    assert {r["perturbation_type"] for r in accuracy} == {
        *cdd_diag.PERTURBATION_TYPES,
        "macro_adversarial",
    }
    assert all(r["value"] == 0.0 and r["n"] > 0 for r in accuracy)
    # GRAB-RAG's behaviour score credits the abstentions where abstaining is right
    behaviour = {r["perturbation_type"]: r["value"] for r in rows if r["metric"] == "behaviour"}
    assert behaviour["clean"] == 0.0 and behaviour["distractor"] == 0.0  # Q100, Q50
    assert behaviour["entity_swap"] == behaviour["no_answer"] == behaviour["inter_context"] == 1.0


def test_the_adversarial_macro_is_over_the_papers_types_only() -> None:
    conditions = ["Q100", "Q50", "Q0", "QC", "QX"]
    contexts = {c: [{"qid": c, "answers": ["Paris"]}] for c in conditions}
    contexts["QC"] = [
        {"qid": f"QC{tier}", "answers": ["Paris"], "tier": tier} for tier in ("3", "1", "2")
    ]
    right, wrong = _outcome("answer", "Paris"), _outcome("answer", "Lyon")
    outcome = {"Q100": right, "Q50": right, "Q0": right, "QX": right, "QC3": right}
    outcome |= {"QC1": wrong, "QC2": right}
    decisions = {
        (c, "P1"): [{"qid": r["qid"], **outcome[r["qid"]]} for r in contexts[c]] for c in conditions
    }
    rows = cdd_diag.diagnostics("m", "d", conditions, contexts, None, decisions, n_resamples=50)
    got = {(r["perturbation_type"], r["metric"]): r for r in rows}
    # entity swap (QC tier 3) 1, temporal shift (tier 1) 0, distractor (Q50) 1
    assert got[("distractor", "accuracy")]["value"] == 1.0
    macro = got[("macro_adversarial", "accuracy")]
    assert (macro["value"], macro["n"]) == (pytest.approx(2 / 3), 3)
    # numeric, QX and Q0 are reported beside it, outside the macro
    for kind in ("numeric", "inter_context", "no_answer"):
        assert (got[(kind, "accuracy")]["value"], got[(kind, "accuracy")]["n"]) == (1.0, 1)


def _outcome(decision: str | None, answer: str | None = "") -> dict[str, Any]:
    return {"decision": decision, "answer": answer}


def _trace_row(
    qid: str, clean: dict, truncated: dict, mistake: dict, contextual: str, parametric: str
) -> dict[str, Any]:
    return {
        "qid": qid,
        **clean,
        "trace": {
            CONTEXTUAL: {"fields": {"answer": contextual}},
            PARAMETRIC: {"fields": {"answer": parametric}},
        },
        "ablations": {"no_premise": truncated, "no_divergence": clean},
        "perturbations": {"truncated": truncated, "mistake": mistake},
    }


def _diagnostic_inputs() -> tuple[dict, dict, dict]:
    gold = ["Paris"]
    contexts = {
        "Q100": [{"qid": f"a{i}", "answers": gold} for i in range(4)],
        "QC": [
            {"qid": "c0", "answers": gold, "tier": "3"},
            {"qid": "c1", "answers": gold, "tier": "1"},
        ],
    }
    right, wrong = _outcome("answer", "Paris"), _outcome("answer", "Lyon")
    abstain = _outcome("abstain")
    traces = {
        # clean 3/4 correct; truncated 2/4; mistake 0/4
        "Q100": [
            _trace_row("a0", right, right, wrong, "Paris", "Paris"),
            _trace_row("a1", right, wrong, wrong, "Paris", "Rome"),
            _trace_row("a2", right, right, wrong, "Rome", "Paris"),
            _trace_row("a3", wrong, wrong, wrong, "Lyon", ""),
        ],
        # accuracy: clean 1/2 (c0 recovers the true answer); truncated 0/2; mistake 1/2
        # behaviour (abstaining is right): clean 1/2; truncated 2/2; mistake 0/2
        "QC": [
            _trace_row("c0", right, abstain, wrong, "Lyon", "Paris"),
            _trace_row("c1", abstain, abstain, right, "Lyon", "Paris"),
        ],
    }
    decisions = {
        ("Q100", "CDD"): [
            {"qid": r["qid"], **_outcome(r["decision"], r["answer"])} for r in traces["Q100"]
        ],
        ("QC", "CDD"): [
            {"qid": r["qid"], **_outcome(r["decision"], r["answer"])} for r in traces["QC"]
        ],
        ("Q100", "P1"): [{"qid": f"a{i}", **right} for i in range(4)],
        ("QC", "P1"): [{"qid": "c0", **right}, {"qid": "c1", **wrong}],
    }
    return contexts, traces, decisions


def _by_key(rows: list[dict[str, Any]]) -> dict[tuple, dict[str, Any]]:
    return {
        (
            r["section"],
            r["policy"],
            r["variant"],
            r["condition"],
            r["perturbation_type"],
            r["metric"],
        ): r
        for r in rows
    }


def test_diagnostics_on_hand_made_rows() -> None:
    contexts, traces, decisions = _diagnostic_inputs()
    rows = cdd_diag.diagnostics(
        "m", "d", ["Q100", "QC"], contexts, traces, decisions, n_resamples=200, seed=1
    )
    assert all(tuple(r) == cdd_diag.DIAGNOSTIC_COLUMNS for r in rows)
    got = _by_key(rows)

    def value(*key):
        return got[key]["value"]

    # sensitivity = (clean - corrupted) / clean
    assert value("sensitivity", "CDD", "truncated", "Q100", "", "acc_clean") == 0.75
    assert value("sensitivity", "CDD", "truncated", "Q100", "", "acc_corrupted") == 0.5
    assert value("sensitivity", "CDD", "truncated", "Q100", "", "sensitivity") == pytest.approx(
        1 / 3
    )
    assert value("sensitivity", "CDD", "mistake", "Q100", "", "sensitivity") == 1.0
    assert value("sensitivity", "CDD", "truncated", "QC", "", "sensitivity") == 1.0
    assert value("sensitivity", "CDD", "mistake", "QC", "", "sensitivity") == 0.0
    assert value("sensitivity", "CDD", "mistake", "all", "", "sensitivity") == pytest.approx(
        (4 / 6 - 1 / 6) / (4 / 6)
    )
    assert value("sensitivity", "CDD", "truncated", "all", "", "acc_corrupted") == 2 / 6
    assert value("sensitivity", "CDD", "truncated", "Q100", "", "changed") == 0.25
    entry = got[("sensitivity", "CDD", "mistake", "Q100", "", "sensitivity")]
    assert entry["n"] == 4 and entry["ci_low"] <= entry["value"] <= entry["ci_high"]
    # ablations (no_premise = the truncated outcomes here, no_divergence = clean)
    assert value("ablation", "CDD", "no_premise", "Q100", "", "accuracy") == 0.5
    assert value("ablation", "CDD", "no_divergence", "all", "", "accuracy") == pytest.approx(4 / 6)
    assert value("ablation", "CDD", "full", "QC", "", "answer_rate") == 0.5
    # without premise isolation (the truncated outcomes) QC abstains throughout: no
    # correct answer, every behaviour right; the two are separate metrics
    assert value("ablation", "CDD", "no_premise", "QC", "", "accuracy") == 0.0
    assert value("ablation", "CDD", "no_premise", "QC", "", "behaviour") == 1.0
    assert value("ablation", "CDD", "full", "QC", "", "behaviour") == 0.5
    # source control of the answered full rows at Q100: a0 both, a1 context, a2
    # parametric, a3 context ("Lyon" = step 1)
    counts = {
        label: value("source_control", "CDD", "full", "Q100", "", label)
        for label in ("context", "parametric", "both", "neither")
    }
    assert counts == {"context": 2, "parametric": 1, "both": 1, "neither": 0}
    assert got[("source_control", "CDD", "full", "Q100", "", "context")]["n"] == 4
    assert value("source_control", "CDD", "full", "QC", "", "parametric") == 1  # c0 = CB
    # perturbation types: CDD clean 3/4; entity swap (tier 3) 1/1; temporal (tier 1) 0/1
    # (it abstained: right behaviour, no correct answer)
    assert value("perturbation_type", "CDD", "", "", "clean", "accuracy") == 0.75
    assert value("perturbation_type", "CDD", "", "", "entity_swap", "accuracy") == 1.0
    assert value("perturbation_type", "CDD", "", "", "temporal_shift", "accuracy") == 0.0
    missing = got[("perturbation_type", "CDD", "", "", "numeric", "accuracy")]
    assert math.isnan(missing["value"]) and missing["n"] == 0 and missing["reason"]
    macro = got[("perturbation_type", "CDD", "", "", "macro_adversarial", "accuracy")]
    assert (macro["value"], macro["n"]) == (0.5, 2)  # mean of 1.0 and 0.0, not pooled
    assert macro["ci_low"] <= 0.5 <= macro["ci_high"]
    assert value("perturbation_type", "CDD", "", "", "temporal_shift", "behaviour") == 1.0
    # P1 answered "Paris" at c0: a correct answer, the wrong behaviour for GRAB-RAG
    assert value("perturbation_type", "P1", "", "", "entity_swap", "accuracy") == 1.0
    assert value("perturbation_type", "P1", "", "", "entity_swap", "behaviour") == 0.0
    assert not any(r["metric"] == "accuracy_lenient" for r in rows)
    # deterministic
    again = cdd_diag.diagnostics(
        "m", "d", ["Q100", "QC"], contexts, traces, decisions, n_resamples=200, seed=1
    )
    assert json.dumps(again) == json.dumps(rows)


def test_diagnostics_edge_cases() -> None:
    contexts, traces, decisions = _diagnostic_inputs()
    # every clean answer wrong: sensitivity undefined, with its reason
    zero = {"Q100": [{**r, "decision": "abstain", "answer": ""} for r in traces["Q100"]]}
    rows = _by_key(
        cdd_diag.diagnostics(
            "m", "d", ["Q100"], {"Q100": contexts["Q100"]}, zero, {}, n_resamples=100
        )
    )
    entry = rows[("sensitivity", "CDD", "truncated", "Q100", "", "sensitivity")]
    assert math.isnan(entry["value"]) and "clean accuracy is 0" in entry["reason"]
    # a condition without rows (no QC-eligible question) gives NaN rows, not a crash
    empty = cdd_diag.diagnostics(
        "m", "d", ["QC"], {"QC": []}, {"QC": []}, {("QC", "CDD"): []}, n_resamples=100
    )
    assert empty and all(math.isnan(r["value"]) or r["section"] == "source_control" for r in empty)
    # without diagnostics runs: only source control and the perturbation types
    plain = {
        c: [{k: v for k, v in r.items() if k not in ("ablations", "perturbations")} for r in rs]
        for c, rs in traces.items()
    }
    sections = {
        r["section"]
        for r in cdd_diag.diagnostics(
            "m", "d", ["Q100", "QC"], contexts, plain, decisions, n_resamples=100
        )
    }
    assert sections == {"source_control", "perturbation_type"}
    mixed = {"Q100": plain["Q100"], "QC": traces["QC"]}
    with pytest.raises(DataError, match="different cdd.diagnostics"):
        cdd_diag.diagnostics("m", "d", ["Q100", "QC"], contexts, mixed, decisions)
    with pytest.raises(DataError, match="lack qid"):
        cdd_diag.diagnostics(
            "m", "d", ["Q100"], contexts, {"Q100": traces["Q100"][:2]}, {}, n_resamples=100
        )
    # no traces at all (only baselines configured): perturbation types only
    only = cdd_diag.diagnostics("m", "d", ["Q100", "QC"], contexts, None, decisions)
    assert {r["section"] for r in only} == {"perturbation_type"}


def test_cdd_tables_from_hand_made_frames(tmp_path) -> None:
    from grabrag.core.outputs import read_diagnostics
    from grabrag.report import cdd_tables as T
    from grabrag.report.tables import display_policies
    from grabrag.report.tabular import Table, rows_csv

    from .test_tables import frame

    contexts, traces, decisions = _diagnostic_inputs()
    # as the tables rule reads them: written by the diagnostics rule, read back
    rows_csv(
        tmp_path / "diagnostics.csv",
        cdd_diag.diagnostics(
            "m", "d", ["Q100", "QC"], contexts, traces, decisions, n_resamples=100
        ),
        cdd_diag.DIAGNOSTIC_COLUMNS,
    )
    diag = read_diagnostics([tmp_path / "diagnostics.csv"])
    metrics = frame(
        [
            ("m", "d", policy, condition, metric, 0.5, 0.4, 0.6, 4, "")
            for policy in ("P1", "CDD", "P3")
            for condition in ("Q100", "QC")
            for metric in ("answer_rate", "em")
        ],
        (
            "model",
            "dataset",
            "policy",
            "condition",
            "metric",
            "value",
            "ci_low",
            "ci_high",
            "n",
            "reason",
        ),
    )
    results = T.table_cdd_results(metrics, diag)
    assert results["policy"] == ["P1", "CDD"]  # P3 is not a CDD-table policy
    assert results.rows[1]["HwSA@QC [95% CI]"] == "50.0 [40.0, 60.0]"
    assert results.rows[1]["Ans@Q100 [95% CI]"] == "50.0 [40.0, 60.0]"
    assert results.rows[1]["Acc clean"] == "75.0" and results.rows[1]["Acc entity_swap"] == "100.0"
    assert "Acc numeric" not in results.columns  # no row of that type
    acc = [c for c in results.columns if c.startswith("Acc")]
    assert acc == [
        "Acc clean",
        "Acc entity_swap",
        "Acc temporal_shift",
        "Acc adversarial macro [95% CI]",
    ]
    assert results.rows[0]["Acc entity_swap"] == "100.0"  # P1's "Paris" is the gold answer
    assert results.rows[1]["Acc adversarial macro [95% CI]"].startswith("50.0 [")
    sensitivity = T.table_cdd_sensitivity(diag)
    assert list(dict.fromkeys(sensitivity["perturbation"])) == ["truncation", "mistake injection"]
    assert sensitivity["condition"][:3] == ["Q100", "QC", "all"]
    assert sensitivity.rows[0]["Sensitivity [95% CI]"].startswith("+33.3 [")
    ablation = T.table_cdd_ablation(diag)
    assert ablation.columns[-6:] == [
        "Acc full CDD",
        "Acc without premise isolation",
        "Acc without divergence check",
        "Behaviour full CDD",
        "Behaviour without premise isolation",
        "Behaviour without divergence check",
    ]
    assert ablation.rows[0]["Acc without premise isolation"].startswith("50.0")
    sources = T.table_cdd_source_control(diag)
    assert sources.rows[0]["context"] == "2 (50.0%)" and sources.rows[0]["answered"] == 4
    # CDD_ALPHA is printed as CDD-alpha
    shown = display_policies(Table([{"policy": "CDD_ALPHA"}, {"policy": "CDD"}]))
    assert shown["policy"] == ["CDD-alpha", "CDD"]
