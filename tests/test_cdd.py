"""CDD (issue 9): step grammars and parsing, the pipeline with a scripted completer,
the CDD-alpha gate, the prompt-only baselines and the trace diagnostics. No model runs
here: the completer is a script, which tests the pipeline logic only."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import numpy as np
import pytest

from grabrag import cdd
from grabrag.cdd import (
    ABLATED,
    BASELINE_PROMPTS,
    CONTEXTUAL,
    DIVERGENCE,
    FAILED,
    GATE_BYPASS,
    GATE_THRESHOLD,
    NOT_DIVERGENT,
    OK,
    PARAMETRIC,
    PARSE_FAILED,
    PREMISE,
    REPAIRED,
    RESOLUTION,
    RESOLVED,
    SKIPPED,
    STEP_GRAMMARS,
    STEP_INSTRUCTIONS,
    STEPS,
    TRUNCATED,
    baseline_messages,
    causal_sensitivity,
    cdd_alpha_decision,
    cdd_alpha_row,
    gate_score,
    inject_mistake,
    length_matched,
    parametric_from_closed_book,
    parse_step,
    perturbation_type,
    premise_found,
    rerun_resolution,
    resolution_messages,
    run_cdd,
    sensitivity_bootstrap,
    source_control,
    step_messages,
    truncate_trace,
    within_length,
    word_count,
)
from grabrag.generation import parse_output
from grabrag.prompts import (
    GBNF_GRAMMAR,
    POLICY_INSTRUCTIONS,
    RESPONSE_FORMAT,
    SYSTEM_CONTEXT,
    context_user_prompt,
)

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
        "rule": PARSE_FAILED,
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
    assert cdd.high_conflict(gate_score("red car", "red bus"))
    assert not cdd.high_conflict(gate_score("red big car", "red big bus"))  # F1 2/3
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
        PARSE_FAILED,
    )
    # from the stored trace: step 1 "Lyon" vs CB "Paris" -> score 1, routed
    stored = cdd_alpha_row(P1_ROW, cdd_row)
    assert stored["gate_score"] == 1.0 and stored["gated"] and stored["answer"] == "Paris"
    agreeing = {
        **cdd_row,
        "trace": {**cdd_row["trace"], CONTEXTUAL: {"fields": {"answer": "Paris"}}},
    }
    assert cdd_alpha_row(P1_ROW, agreeing)["route"] == "standard"


# --- baselines ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["CAI", "SHAM", "REFLECT", "FILTER"])
def test_baseline_messages_are_grabrags_prompt_with_the_baseline_instruction(name: str) -> None:
    messages = baseline_messages(name, QUESTION, CONTEXT)
    assert messages[0] == {"role": "system", "content": SYSTEM_CONTEXT}
    user = messages[1]["content"]
    assert BASELINE_PROMPTS[name] in user and CONTEXT in user and QUESTION in user
    assert user.endswith(RESPONSE_FORMAT)
    # identical to GRAB-RAG's P1 prompt, the policy instruction swapped for the baseline's
    p1 = context_user_prompt(CONTEXT, QUESTION, "P1")
    assert user == p1.replace(POLICY_INSTRUCTIONS["P1"], BASELINE_PROMPTS[name])
    assert POLICY_INSTRUCTIONS["P1"] in BASELINE_PROMPTS[name]  # each keeps P1's clause
    assert cdd.BASELINE_GRAMMAR == GBNF_GRAMMAR
    ok = '{"decision": "abstain", "answer": "", "confidence": 10, "reasoning": "conflict"}'
    assert parse_output(ok, "stop").status == "ok"


def test_unknown_baseline() -> None:
    with pytest.raises(ValueError, match="unknown baseline"):
        baseline_messages("P9", QUESTION, CONTEXT)


def test_sham_is_length_matched_and_content_free() -> None:
    sham = BASELINE_PROMPTS["SHAM"]
    target = word_count(" ".join(STEP_INSTRUCTIONS[s] for s in STEPS))
    assert target == cdd.CDD_INSTRUCTION_WORDS
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
    assert cdd.row_source_control(row) == "parametric"
    assert cdd.row_source_control({**row, "decision": "abstain"}) == "neither"


@pytest.mark.parametrize(
    ("condition", "tier", "expected"),
    [
        ("QC", "3", "entity_swap"),
        ("QC", "4", "entity_swap"),
        ("QC", 4, "entity_swap"),
        ("QC", "1", "temporal_shift"),
        ("QC", "1b", "temporal_shift"),
        ("QC", "2", "numeric"),
        ("Q0", None, "distractor"),
        ("QX", None, "inter_context"),
        ("Q100", None, "clean"),
        ("Q50", "3", "clean"),  # the tier is read only for QC
    ],
)
def test_perturbation_type(condition: str, tier: Any, expected: str) -> None:
    assert perturbation_type(condition, tier) == expected


def test_perturbation_type_rejects_unknown_inputs() -> None:
    with pytest.raises(ValueError, match="tier"):
        perturbation_type("QC", "5")
    with pytest.raises(ValueError, match="tier"):
        perturbation_type("QC")
    with pytest.raises(ValueError, match="condition"):
        perturbation_type("Qclosed")


# === the workflow layer (grabrag.cdd_runs) =================================================

from grabrag import cdd_runs  # noqa: E402
from grabrag.errors import DataError  # noqa: E402
from grabrag.generation import run_cells  # noqa: E402

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
        (step,) = [s for s in STEPS if STEP_INSTRUCTIONS[s] in user]
        self.calls.append(step)
        raw = self.script[step]
        if step == RESOLUTION and "the correct answer is" in user:
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


def test_cdd_question_never_crashes_on_unparseable_output() -> None:
    script = {step: "not json" for step in STEPS}
    row = cdd_runs.cdd_question(StepCompleter(script), Resets(), CONTEXT_ROW, CB_ROW)
    assert (row["decision"], row["rule"]) == (None, PARSE_FAILED)
    statuses = {step: entry["status"] for step, entry in row["trace"].items()}
    assert statuses[CONTEXTUAL] == FAILED and statuses[RESOLUTION] == FAILED
    assert set(statuses.values()) <= set(cdd_runs.STEP_STATUSES)
    # no answer for the divergence fallback: no divergence, premise skipped
    assert statuses[PREMISE] == SKIPPED
    assert row["ablations"]["no_divergence"]["rule"] == PARSE_FAILED


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
    assert "the correct answer is a very long closed book answer" in user
    real = cdd_runs.cdd_question(StepCompleter(), Resets(), _rows(1)[0], long_cb)
    longest_real = max(
        len(json.dumps(step_messages(RESOLUTION, QUESTION, CONTEXT, real["trace"]))) for _ in (0,)
    )
    assert len(json.dumps(messages)) > longest_real


def test_contracts_follow_the_prompts(monkeypatch) -> None:
    prompt, baseline = cdd_runs.prompt_contract(), cdd_runs.baseline_contract()
    assert re.fullmatch(r"[0-9a-f]{16}", prompt) and prompt == cdd_runs.prompt_contract()
    monkeypatch.setitem(STEP_INSTRUCTIONS, PREMISE, STEP_INSTRUCTIONS[PREMISE] + " Be exact.")
    assert cdd_runs.prompt_contract() != prompt
    assert cdd_runs.baseline_contract() == baseline
    monkeypatch.setitem(BASELINE_PROMPTS, "CAI", BASELINE_PROMPTS["CAI"] + " Be careful.")
    assert cdd_runs.baseline_contract() != baseline


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
    assert cdd_runs.baseline_decisions(cells["CAI"], "CAI")[0]["rule"] == "generated"


# --- decision rows -----------------------------------------------------------------------


def _trace_rows() -> list[dict[str, Any]]:
    first = cdd_runs.cdd_question(StepCompleter(), Resets(), _rows(2)[0], _cb(1)[0])
    failed = cdd_runs.cdd_question(
        StepCompleter({**SCRIPT, RESOLUTION: "{broken"}), Resets(), _rows(2)[1], _cb(2)[1]
    )
    return [first, failed]


def test_cdd_decisions() -> None:
    rows = cdd_runs.cdd_decisions(_trace_rows())
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
    assert (rows[1]["rule"], rows[1]["parse_status"]) == (PARSE_FAILED, FAILED)
    with pytest.raises(DataError, match="more than once"):
        cdd_runs.cdd_decisions(_trace_rows()[:1] * 2)


def test_cdd_alpha_decisions_keep_p1_for_low_conflict_questions() -> None:
    traces = _trace_rows()
    # q1's step 1 agrees with its CB answer: no conflict, P1's row stands
    traces[1]["trace"][CONTEXTUAL]["fields"]["answer"] = "Paris"
    p1 = [
        {**P1_ROW, "qid": "q0", "index": 0, "condition": "QC", "prompt": "P1"},
        {**P1_ROW, "qid": "q1", "index": 1, "condition": "QC", "prompt": "P1", "answer": "Nice"},
    ]
    rows = cdd_runs.cdd_alpha_decisions(p1, traces)
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
    assert not any(r["gated"] for r in cdd_runs.cdd_alpha_decisions(p1, traces, 1.01))
    with pytest.raises(DataError, match="no CDD trace row"):
        cdd_runs.cdd_alpha_decisions(p1, traces[:1])
    with pytest.raises(DataError, match="wrong generation file"):
        cdd_runs.cdd_alpha_decisions([{**p1[0], "prompt": "P0"}], traces)


def test_baseline_decisions() -> None:
    rows = [
        {"qid": "a", "prompt": "SHAM", "decision": "answer", "answer": "x", "confidence": 5},
        {"qid": "b", "prompt": "SHAM", "decision": None, "parse_status": "failed"},
    ]
    out = cdd_runs.baseline_decisions(rows, "SHAM")
    assert [(r["decision"], r["confidence"], r["rule"]) for r in out] == [
        ("answer", 5, "generated"),
        (None, None, "parse_failed"),
    ]
    with pytest.raises(DataError, match="wrong generation file"):
        cdd_runs.baseline_decisions(rows, "CAI")
    with pytest.raises(ValueError, match="not a baseline"):
        cdd_runs.baseline_decisions(rows, "P1")


def test_policies_decide_dispatches_the_cdd_family() -> None:
    from grabrag.policies import POLICIES, POLICY_INPUTS, decide

    assert POLICIES[-6:] == ("CDD", "CDD_ALPHA", "CAI", "SHAM", "REFLECT", "FILTER")
    assert POLICY_INPUTS["CDD_ALPHA"] == ("P1", "CDD")
    traces = _trace_rows()
    assert decide("CDD", {"CDD": traces})[0]["policy"] == "CDD"
    p1 = [{**P1_ROW, "qid": q} for q in ("q0", "q1")]
    gated = decide("CDD_ALPHA", {"P1": p1, "CDD": traces}, gate_threshold=1.01)
    assert [r["rule"] for r in gated] == [GATE_BYPASS, GATE_BYPASS]
    cai = [{"qid": "a", "prompt": "CAI", "decision": "abstain", "answer": "", "confidence": 3}]
    assert decide("CAI", {"CAI": cai})[0]["rule"] == "generated"
    with pytest.raises(ValueError, match="needs inputs"):
        decide("CDD_ALPHA", {"CDD": traces})


# --- diagnostics -------------------------------------------------------------------------


def test_correct_and_lenient() -> None:
    answer = {"decision": "answer", "answer": "the Paris"}
    abstain = {"decision": "abstain", "answer": ""}
    failed = {"decision": None, "answer": None}
    assert cdd_runs.correct(answer, "Q100", ["Paris"])
    assert not cdd_runs.correct(answer, "Q50", ["Lyon"])
    assert not cdd_runs.correct(abstain, "Q100", ["Paris"])
    assert cdd_runs.correct(abstain, "QC", ["Paris"]) and cdd_runs.correct(abstain, "QX", [])
    assert not cdd_runs.correct(answer, "QC", ["Paris"])
    assert cdd_runs.correct_lenient(answer, "QC", ["Paris"])
    assert not cdd_runs.correct_lenient(answer, "Q0", ["Lyon"])
    assert not cdd_runs.correct(failed, "Q0", []) and not cdd_runs.correct(None, "Q100", ["x"])
    with pytest.raises(ValueError, match="condition"):
        cdd_runs.correct(answer, "Qclosed", [])


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
        # clean 1/2 (abstaining is right); truncated 2/2; mistake 1/2
        "QC": [
            _trace_row("c0", abstain, abstain, abstain, "Lyon", "Paris"),
            _trace_row("c1", wrong, abstain, wrong, "Lyon", "Paris"),
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
    rows = cdd_runs.diagnostics(
        "m", "d", ["Q100", "QC"], contexts, traces, decisions, n_resamples=200, seed=1
    )
    assert all(tuple(r) == cdd_runs.DIAGNOSTIC_COLUMNS for r in rows)
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
    assert value("sensitivity", "CDD", "truncated", "QC", "", "sensitivity") == -1.0
    assert value("sensitivity", "CDD", "mistake", "all", "", "sensitivity") == pytest.approx(
        (4 / 6 - 1 / 6) / (4 / 6)
    )
    assert value("sensitivity", "CDD", "truncated", "Q100", "", "changed") == 0.25
    entry = got[("sensitivity", "CDD", "mistake", "Q100", "", "sensitivity")]
    assert entry["n"] == 4 and entry["ci_low"] <= entry["value"] <= entry["ci_high"]
    # ablations (no_premise = the truncated outcomes here, no_divergence = clean)
    assert value("ablation", "CDD", "no_premise", "Q100", "", "accuracy") == 0.5
    assert value("ablation", "CDD", "no_divergence", "all", "", "accuracy") == pytest.approx(4 / 6)
    assert value("ablation", "CDD", "full", "QC", "", "answer_rate") == 0.5
    # source control of the answered full rows at Q100: a0 both, a1 context, a2
    # parametric, a3 context ("Lyon" = step 1)
    counts = {
        label: value("source_control", "CDD", "full", "Q100", "", label)
        for label in ("context", "parametric", "both", "neither")
    }
    assert counts == {"context": 2, "parametric": 1, "both": 1, "neither": 0}
    assert got[("source_control", "CDD", "full", "Q100", "", "context")]["n"] == 4
    assert value("source_control", "CDD", "full", "QC", "", "neither") == 0  # c1 = step 1
    # perturbation types: CDD clean 3/4; entity swap (tier 3) 1/1; temporal (tier 1) 0/1
    assert value("perturbation_type", "CDD", "", "", "clean", "accuracy") == 0.75
    assert value("perturbation_type", "CDD", "", "", "entity_swap", "accuracy") == 1.0
    assert value("perturbation_type", "CDD", "", "", "temporal_shift", "accuracy") == 0.0
    missing = got[("perturbation_type", "CDD", "", "", "numeric", "accuracy")]
    assert math.isnan(missing["value"]) and missing["n"] == 0 and missing["reason"]
    macro = got[("perturbation_type", "CDD", "", "", "macro_adversarial", "accuracy")]
    assert (macro["value"], macro["n"]) == (0.5, 2)  # mean of 1.0 and 0.0, not pooled
    assert macro["ci_low"] <= 0.5 <= macro["ci_high"]
    # P1 answered "Paris" at c0: wrong under accuracy, right under the lenient form
    assert value("perturbation_type", "P1", "", "", "entity_swap", "accuracy") == 0.0
    assert value("perturbation_type", "P1", "", "", "entity_swap", "accuracy_lenient") == 1.0
    # deterministic
    again = cdd_runs.diagnostics(
        "m", "d", ["Q100", "QC"], contexts, traces, decisions, n_resamples=200, seed=1
    )
    assert json.dumps(again) == json.dumps(rows)


def test_diagnostics_edge_cases() -> None:
    contexts, traces, decisions = _diagnostic_inputs()
    # every clean answer wrong: sensitivity undefined, with its reason
    zero = {"Q100": [{**r, "decision": "abstain", "answer": ""} for r in traces["Q100"]]}
    rows = _by_key(
        cdd_runs.diagnostics(
            "m", "d", ["Q100"], {"Q100": contexts["Q100"]}, zero, {}, n_resamples=100
        )
    )
    entry = rows[("sensitivity", "CDD", "truncated", "Q100", "", "sensitivity")]
    assert math.isnan(entry["value"]) and "clean accuracy is 0" in entry["reason"]
    # a condition without rows (no QC-eligible question) gives NaN rows, not a crash
    empty = cdd_runs.diagnostics(
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
        for r in cdd_runs.diagnostics(
            "m", "d", ["Q100", "QC"], contexts, plain, decisions, n_resamples=100
        )
    }
    assert sections == {"source_control", "perturbation_type"}
    mixed = {"Q100": plain["Q100"], "QC": traces["QC"]}
    with pytest.raises(DataError, match="different cdd.diagnostics"):
        cdd_runs.diagnostics("m", "d", ["Q100", "QC"], contexts, mixed, decisions)
    with pytest.raises(DataError, match="lack qid"):
        cdd_runs.diagnostics(
            "m", "d", ["Q100"], contexts, {"Q100": traces["Q100"][:2]}, {}, n_resamples=100
        )
    # no traces at all (only baselines configured): perturbation types only
    only = cdd_runs.diagnostics("m", "d", ["Q100", "QC"], contexts, None, decisions)
    assert {r["section"] for r in only} == {"perturbation_type"}


def test_cdd_tables_from_hand_made_frames() -> None:
    import pandas as pd

    from grabrag import tables as T

    contexts, traces, decisions = _diagnostic_inputs()
    diag = cdd_runs.diagnostics_frame(
        cdd_runs.diagnostics("m", "d", ["Q100", "QC"], contexts, traces, decisions, n_resamples=100)
    )
    metrics = pd.DataFrame(
        [
            ("m", "d", policy, condition, metric, 0.5, 0.4, 0.6, 4, "")
            for policy in ("P1", "CDD", "P3")
            for condition in ("Q100", "QC")
            for metric in ("answer_rate", "em")
        ],
        columns=(
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
    assert list(results.policy) == ["P1", "CDD"]  # P3 is not a CDD-table policy
    assert results.loc[1, "HwSA@QC [95% CI]"] == "50.0 [40.0, 60.0]"
    assert results.loc[1, "Ans@Q100 [95% CI]"] == "50.0 [40.0, 60.0]"
    assert results.loc[1, "Acc clean"] == "75.0" and results.loc[1, "Acc entity_swap"] == "100.0"
    assert "Acc numeric" not in results.columns  # no row of that type
    assert results.loc[1, "Acc adversarial macro [95% CI]"].startswith("50.0 [")
    sensitivity = T.table_cdd_sensitivity(diag)
    assert list(sensitivity.perturbation.unique()) == ["truncation", "mistake injection"]
    assert list(sensitivity.condition[:3]) == ["Q100", "QC", "all"]
    assert sensitivity.loc[0, "Sensitivity [95% CI]"].startswith("+33.3 [")
    ablation = T.table_cdd_ablation(diag)
    assert list(ablation.columns[-3:]) == [
        "Acc full CDD",
        "Acc without premise isolation",
        "Acc without divergence check",
    ]
    assert ablation.loc[0, "Acc without premise isolation"].startswith("50.0")
    sources = T.table_cdd_source_control(diag)
    assert sources.loc[0, "context"] == "2 (50.0%)" and sources.loc[0, "answered"] == 4
    # CDD_ALPHA is printed as CDD-alpha
    shown = T.display_policies(pd.DataFrame({"policy": ["CDD_ALPHA", "CDD"]}))
    assert list(shown.policy) == ["CDD-alpha", "CDD"]
