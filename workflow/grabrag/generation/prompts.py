"""Prompts and grammar, verbatim from GRAB-RAG Appendix B.

The paper's text shows a blank line after every line (an artefact of its extraction);
we keep every line, in order and character for character, and separate the logical
blocks (context, question, instruction, format) with one blank line.
tests/test_prompts.py checks the lines against the paper text itself.
"""

from __future__ import annotations

from grabrag.core.conditions import CLOSED_BOOK_PROMPT

SYSTEM_CONTEXT = (
    "You are a helpful question-answering assistant.\n"
    "Answer the question using ONLY the provided context.\n"
    "Always respond with valid JSON."
)
"""System message for P0-P2 and P3's context pass."""

SYSTEM_CLOSED_BOOK = (
    "You are a helpful question-answering assistant.\nAlways respond with valid JSON."
)
"""System message for the closed-book (CB) pass."""

POLICY_INSTRUCTIONS = {
    "P0": "",  # "(No additional instruction.)"
    "P1": (
        "If the context does not contain enough information to answer the question, "
        'set decision to "abstain" and leave the answer empty.'
    ),
    "P2": (
        "First, analyze whether the context contains sufficient information to answer the "
        "question. Reason step by step. Then either answer the question or state that the "
        'context is insufficient by setting decision to "abstain".'
    ),
}
CONTEXT_PROMPTS = tuple(POLICY_INSTRUCTIONS)

RESPONSE_FORMAT = (
    "Respond ONLY with a JSON object in this exact format:\n"
    '{"decision": "answer" or "abstain",\n'
    '"answer": "your answer or empty string",\n'
    '"confidence": 0-100,\n'
    '"reasoning": "brief reasoning"}\n'
    "Start with { immediately.\n"
    "Keep reasoning brief.\n"
    "Do not use backslashes."
)

# The paper prints the root rule over six lines; llama.cpp's GBNF parser ends a rule at
# a newline outside parentheses (and crashes at sampling time), so the root rule is one
# line here. Token for token it is the paper's grammar (tests/test_prompts.py).
GBNF_GRAMMAR = (
    r"""root ::= "{" ws "\"decision\":" ws decision "," ws "\"answer\":" ws str "," ws """
    r""""\"confidence\":" ws confidence "," ws "\"reasoning\":" ws str ws "}"
ws ::= [ \t\n]*
str ::= "\"" [^"\\]* "\""
decision ::= "\"answer\"" | "\"abstain\""
confidence ::= "0" | [1-9] | [1-9][0-9] | "100"
"""
)


def context_user_prompt(context: str, question: str, prompt: str) -> str:
    """User message for P0, P1, P2: everything before the instruction is shared by the
    three prompts, so llama.cpp reuses its KV cache for that prefix."""
    if prompt not in POLICY_INSTRUCTIONS:
        raise ValueError(f"unknown prompt {prompt!r}; known: {', '.join(POLICY_INSTRUCTIONS)}")
    blocks = [f"Context:\n{context}", f"Question: {question}"]
    if POLICY_INSTRUCTIONS[prompt]:
        blocks.append(POLICY_INSTRUCTIONS[prompt])
    blocks.append(RESPONSE_FORMAT)
    return "\n\n".join(blocks)


def closed_book_user_prompt(question: str) -> str:
    """User message for the CB pass (no passages)."""
    return "\n\n".join(
        [
            f"Question: {question}",
            "Answer from your own knowledge.\n"
            'If you do not know the answer, set decision to "abstain" and leave the answer empty.',
            RESPONSE_FORMAT,
        ]
    )


def messages_for(prompt: str, question: str, context: str) -> list[dict[str, str]]:
    if prompt == CLOSED_BOOK_PROMPT:
        return [
            {"role": "system", "content": SYSTEM_CLOSED_BOOK},
            {"role": "user", "content": closed_book_user_prompt(question)},
        ]
    return [
        {"role": "system", "content": SYSTEM_CONTEXT},
        {"role": "user", "content": context_user_prompt(context, question, prompt)},
    ]
