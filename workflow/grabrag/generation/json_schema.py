"""The JSON schema equivalent of a call's GBNF grammar, for servers that take OpenAI's
``response_format: {"type": "json_schema"}`` instead of a grammar (hosted APIs).

Every grammar the stages use (:data:`grabrag.generation.prompts.GBNF_GRAMMAR`, the
EvidentialRAG evaluator's, CDD's steps, gate and baselines', the LLM verifier's) is either
a flat JSON object, ``root ::= "{" ws "\\"name\\":" ws rule "," ws ... ws "}"``, whose
fields' rules are a string, a set of JSON strings, ``true``/``false`` or a finite set of
integers, or a bare choice of words (the verifier's label). :func:`schema_for` derives the
schema from the grammar text itself, so the two cannot drift apart:

- a string rule (``"\\"" [^...]* "\\""``) becomes ``{"type": "string"}``;
- a finite choice of JSON strings becomes a string ``enum``; ``"true" | "false"`` a
  boolean; a finite set of integers an integer with ``minimum`` and ``maximum`` when the
  set is a whole range (confidence 0-100, the evaluator's evidence 0-10), else an ``enum``;
- the fields keep the grammar's order, all are required, nothing else is allowed (the
  strict form hosted APIs ask for).

Choice: a bare choice of words cannot be a JSON document's root in strict mode, so it is
asked for as ``{"label": one of the words}``, and the word is taken back out of the
server's JSON (:func:`unwrap_label`) before the stage parses it, as if the grammar had been
applied. A schema cannot restrict whitespace or forbid escapes in strings as the grammars
do: the parsers read any valid JSON, so no output becomes unreadable, but greedy decoding
may take another path than under the grammar, so rows can differ from the grammar's.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from typing import Any

LABEL = "label"
_RULE = re.compile(r"^(\w+) ::= (.*)$")
_FIELD = re.compile(r'"\\"(\w+)\\":" ws (\w+)')
_LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')
_CLASS = re.compile(r"\[([^\]]*)\]")
# the string rule of every grammar here: a quote, any run of allowed characters, a quote
_STRING_RULE = re.compile(r'^"\\"" \[\^[^\]]*\]\* "\\""$')
# a finite language larger than this is not a choice of values
_MAX_CHOICES = 1000


class SchemaError(ValueError):
    """A grammar that has no JSON schema equivalent here."""


def _rules(gbnf: str) -> dict[str, str]:
    rules = {}
    for line in gbnf.splitlines():
        if match := _RULE.match(line.strip()):
            rules[match.group(1)] = match.group(2).strip()
    if "root" not in rules:
        raise SchemaError(f"the grammar has no root rule: {gbnf[:120]!r}")
    return rules


def _class_chars(body: str) -> list[str]:
    """The characters of a GBNF character class such as ``1-9`` or ``0-9``."""
    chars, i = [], 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            chars.extend(chr(c) for c in range(ord(body[i]), ord(body[i + 2]) + 1))
            i += 3
        else:
            chars.append(body[i])
            i += 1
    return chars


def _alternative(text: str) -> list[str]:
    """Every string one alternative (a sequence of literals and classes) matches."""
    parts: list[list[str]] = []
    position = 0
    for token in re.finditer(r'"(?:[^"\\]|\\.)*"|\[[^\]]*\]|\S+', text):
        position += 1
        value = token.group(0)
        if literal := _LITERAL.fullmatch(value):
            parts.append([json.loads(f'"{literal.group(1)}"')])
        elif klass := _CLASS.fullmatch(value):
            if klass.group(1).startswith("^"):
                raise SchemaError(f"an open character class is not a finite choice: {text!r}")
            parts.append(_class_chars(klass.group(1)))
        else:
            raise SchemaError(f"{value!r} in {text!r} is not a literal or a character class")
    if not position:
        raise SchemaError("an empty alternative")
    return ["".join(p) for p in itertools.product(*parts)]


def _language(body: str) -> list[str]:
    """The finite set of strings a rule of literals, classes and ``|`` matches."""
    strings: list[str] = []
    for alternative in re.split(r"\s+\|\s+", body):
        strings.extend(_alternative(alternative))
        if len(strings) > _MAX_CHOICES:
            raise SchemaError(f"{body!r} is not a finite choice of values")
    return list(dict.fromkeys(strings))


def _value_schema(body: str) -> dict[str, Any]:
    if _STRING_RULE.match(body):
        return {"type": "string"}
    values = _language(body)
    if set(values) == {"true", "false"}:
        return {"type": "boolean"}
    if all(re.fullmatch(r"0|[1-9][0-9]*", v) for v in values):
        numbers = sorted(int(v) for v in values)
        if numbers == list(range(numbers[0], numbers[-1] + 1)):
            return {"type": "integer", "minimum": numbers[0], "maximum": numbers[-1]}
        return {"type": "integer", "enum": numbers}
    if all(len(v) >= 2 and v[0] == v[-1] == '"' for v in values):
        return {"type": "string", "enum": [json.loads(v) for v in values]}
    raise SchemaError(f"{body!r}: neither strings, integers nor booleans")


def _object(fields: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": fields,
        "required": list(fields),
        "additionalProperties": False,
    }


@functools.lru_cache(maxsize=64)
def schema_for(gbnf: str) -> tuple[dict[str, Any], bool]:
    """The JSON schema of ``gbnf``, and whether it is a bare choice of words asked for as
    ``{"label": ...}`` (see :func:`unwrap_label`). A grammar of another shape is a
    :class:`SchemaError` naming what could not be expressed."""
    rules = _rules(gbnf)
    root = rules["root"]
    if root.startswith('"{"'):
        fields = {}
        for name, rule in _FIELD.findall(root):
            if rule not in rules:
                raise SchemaError(f"field {name!r} names rule {rule!r}, which is not defined")
            fields[name] = _value_schema(rules[rule])
        if not fields:
            raise SchemaError(f"an object root with no fields: {root!r}")
        return _object(fields), False
    words = _language(root)
    return _object({LABEL: {"type": "string", "enum": words}}), True


def unwrap_label(content: str) -> str:
    """The word inside a ``{"label": word}`` answer; the content as it came when it is not
    such an object (the stage's parser then counts it as a parse failure)."""
    try:
        value = json.loads(content)
    except json.JSONDecodeError:
        return content
    if isinstance(value, dict) and isinstance(value.get(LABEL), str):
        return value[LABEL]
    return content
