"""Prompts and grammar against GRAB-RAG Appendix B, character for character.

tests/fixtures/grabrag_appendix_b.txt is the paper's "Prompt Templates" section as
extracted (a blank line after every line, a '⬇' before each listing). We compare our
prompts' lines, in order, with the paper's lines.
"""

from __future__ import annotations

from pathlib import Path

from grabrag.generation.prompts import (
    GBNF_GRAMMAR,
    POLICY_INSTRUCTIONS,
    RESPONSE_FORMAT,
    SYSTEM_CLOSED_BOOK,
    SYSTEM_CONTEXT,
    closed_book_user_prompt,
    context_user_prompt,
    messages_for,
)

APPENDIX_B = (Path(__file__).parent / "fixtures" / "grabrag_appendix_b.txt").read_text()
LINES = [line for line in APPENDIX_B.splitlines() if line.strip()]


def listing(title: str, last: str) -> list[str]:
    """The non-empty lines of the listing after ``title``, up to and including ``last``."""
    start = LINES.index(title)
    assert LINES[start + 1] == "⬇"
    end = LINES.index(last, start)
    return LINES[start + 2 : end + 1]


def nonempty(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_system_messages() -> None:
    assert nonempty(SYSTEM_CONTEXT) == listing(
        "System message (P0–P2 and P3 context pass).", "Always respond with valid JSON."
    )
    assert nonempty(SYSTEM_CLOSED_BOOK) == listing(
        "System message (P3 closed-book pass).", "Always respond with valid JSON."
    )


def test_user_scaffold_for_each_policy() -> None:
    scaffold = listing("User-prompt scaffold (P0–P2).", "Do not use backslashes.")
    assert scaffold[:3] == ["Context:", "{context}", "Question: {question}"]
    assert scaffold[3] == "{policy_instruction}"
    assert nonempty(RESPONSE_FORMAT) == scaffold[4:]
    for prompt, instruction in POLICY_INSTRUCTIONS.items():
        text = context_user_prompt("PASSAGES", "Who?", prompt)
        expected = ["Context:", "PASSAGES", "Question: Who?"]
        expected += [instruction] if instruction else []
        assert nonempty(text) == expected + scaffold[4:], prompt


def test_policy_instructions_verbatim() -> None:
    table = APPENDIX_B.split("Instruction inserted at {policy_instruction}", 1)[1]
    rows = [line for line in table.splitlines() if line.startswith(("P0\t", "P1\t", "P2\t"))]
    paper = dict(line.split("\t", 1) for line in rows)
    assert paper["P0"] == "(No additional instruction.)"
    assert POLICY_INSTRUCTIONS["P0"] == ""
    assert POLICY_INSTRUCTIONS["P1"] == paper["P1"]
    assert POLICY_INSTRUCTIONS["P2"] == paper["P2"]


def test_closed_book_prompt() -> None:
    paper = listing("CB user prompt (P3 closed-book pass).", "Do not use backslashes.")
    assert nonempty(closed_book_user_prompt("{question}")) == paper
    messages = messages_for("CB", "Who?", "ignored context")
    assert messages[0]["content"] == SYSTEM_CLOSED_BOOK
    assert "ignored context" not in messages[1]["content"]


def test_grammar_is_the_papers_token_for_token() -> None:
    start = APPENDIX_B.index("root ::=")
    paper = APPENDIX_B[start:]
    assert GBNF_GRAMMAR.split() == paper.split()
    # llama.cpp needs each rule on one line: one line per rule, five rules.
    assert [line.split(" ::= ")[0] for line in GBNF_GRAMMAR.strip().splitlines()] == [
        "root",
        "ws",
        "str",
        "decision",
        "confidence",
    ]
