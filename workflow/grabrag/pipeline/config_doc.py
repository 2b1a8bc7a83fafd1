"""The configuration reference (docs/configuration.md), rendered from the config schema.

:func:`render` walks the schema and writes Markdown: one section per top-level key, and a
table per object with each key's dotted path, type, default, allowed values or range and
description. The schema is loaded as the config check loads it
(:func:`grabrag.pipeline.config.load_schema`), so the policy, adapter and condition names
it lists are the registered ones. Regenerate the page with::

    python -m grabrag.pipeline.config_doc > docs/configuration.md

tests/test_docs.py checks that the page equals this rendering, so it cannot drift from the
schema.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from typing import Any

REGENERATE = "python -m grabrag.pipeline.config_doc > docs/configuration.md"
"""The command that writes the page, from the repository root."""

SCHEMA_PATH = "workflow/grabrag/config.schema.yaml"
NAME = "<name>"
"""The placeholder for a name the config chooses (a model's, a dataset's, an asset's)."""

Node = Mapping[str, Any]


def _resolve(node: Node, root: Node) -> dict[str, Any]:
    """``node`` with its ``$ref`` (a ``#/...`` pointer into ``root``) merged in; the
    node's own keys (a description beside the ``$ref``) win."""
    resolved = dict(node)
    while "$ref" in resolved:
        pointer = resolved.pop("$ref")
        if not pointer.startswith("#/"):
            raise ValueError(f"only local $ref pointers are supported, not {pointer!r}")
        target: Any = root
        for part in pointer[2:].split("/"):
            target = target[part]
        resolved = {**target, **resolved}
    return resolved


def _text(value: str) -> str:
    """A description as one line of a table cell: whitespace collapsed, ``|`` escaped and
    angle brackets as entities (``<asset>`` is no HTML tag)."""
    text = " ".join(str(value).split())
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _value(value: Any) -> str:
    """A YAML value as a config would write it, in flow style."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _code(value: Any) -> str:
    """A value in a code span, with ``|`` escaped for a table cell."""
    return "`" + _value(value).replace("|", "\\|") + "`"


def _map_entry(node: Node, root: Node) -> dict[str, Any] | None:
    """The schema of a map's entries (``additionalProperties`` given as a schema), if
    ``node`` is such a map."""
    entry = node.get("additionalProperties")
    if isinstance(entry, Mapping) and "properties" not in node:
        return _resolve(entry, root)
    return None


def _type(node: Node, root: Node) -> str:
    """The key's type in words: ``integer``, ``string or null``, ``array of number``,
    ``map of name to string``."""
    node = _resolve(node, root)
    if "const" in node:
        return _code(node["const"])
    types = node.get("type")
    if types is None:
        alternatives = node.get("anyOf") or node.get("oneOf")
        if alternatives and all("required" not in alt for alt in alternatives):
            return " or ".join(_type(alt, root) for alt in alternatives)
        return "object" if "properties" in node else "any"
    words = []
    for name in [types] if isinstance(types, str) else list(types):
        if name == "array" and isinstance(node.get("items"), Mapping):
            inner = _type(node["items"], root)
            words.append(f"array of ({inner})" if " or " in inner else f"array of {inner}")
        elif name == "object" and (entry := _map_entry(node, root)) is not None:
            words.append(f"map of name to {_type(entry, root)}")
        else:
            words.append(name)
    return " or ".join(words)


def _range(node: Node) -> str:
    """A number's bounds, ``in [0, 1]`` or ``>= 1``."""
    lower = (
        ("[", node["minimum"])
        if "minimum" in node
        else ("(", node["exclusiveMinimum"])
        if "exclusiveMinimum" in node
        else None
    )
    upper = (
        ("]", node["maximum"])
        if "maximum" in node
        else (")", node["exclusiveMaximum"])
        if "exclusiveMaximum" in node
        else None
    )
    if lower and upper:
        return f"in {lower[0]}{_value(lower[1])}, {_value(upper[1])}{upper[0]}"
    if lower:
        return (">= " if lower[0] == "[" else "> ") + _value(lower[1])
    if upper:
        return ("<= " if upper[0] == "]" else "< ") + _value(upper[1])
    return ""


def _count(low: int | None, high: int | None, noun: str) -> str:
    """A bound on a count, ``at least 1 item``; ``noun`` is the plural."""
    singular = {"items": "item", "entries": "entry", "characters": "character"}[noun]
    if high is not None and high == 1 or low == 1 and high is None:
        noun = singular
    if low is not None and low == high:
        return f"exactly {low} {noun}"
    if low is not None and high is not None:
        return f"{low} to {high} {noun}"
    if low is not None:
        return f"at least {low} {noun}"
    if high is not None:
        return f"at most {high} {noun}"
    return ""


def _allowed(node: Node, root: Node) -> str:
    """The key's allowed values or range in words."""
    node = _resolve(node, root)
    parts = []
    if node.get("enum"):
        parts.append("one of " + ", ".join(_code(v) for v in node["enum"]))
    if "const" in node:
        parts.append("exactly " + _code(node["const"]))
    if bounds := _range(node):
        parts.append(bounds)
    if node.get("minLength") == 1 and "maxLength" not in node:
        parts.append("non-empty")
    elif text := _count(node.get("minLength"), node.get("maxLength"), "characters"):
        parts.append(text)
    if "pattern" in node:
        parts.append("matches " + _code(node["pattern"]))
    if text := _count(node.get("minItems"), node.get("maxItems"), "items"):
        parts.append(text)
    if node.get("uniqueItems"):
        parts.append("no duplicates")
    if text := _count(node.get("minProperties"), node.get("maxProperties"), "entries"):
        parts.append(text)
    names = node.get("propertyNames")
    if isinstance(names, Mapping) and "pattern" in names:
        parts.append("names match " + _code(names["pattern"]))
    alternatives = node.get("anyOf") or node.get("oneOf") or ()
    if alternatives and all("required" not in alt for alt in alternatives):
        described = []
        for alt in alternatives:
            alt = _resolve(alt, root)
            if "const" in alt:
                described.append(_code(alt["const"]))
            else:
                allowed = _allowed(alt, root)
                described.append(f"{_type(alt, root)} {allowed}".strip())
        parts.append(" or ".join(described))
    items = node.get("items")
    if isinstance(items, Mapping) and (inner := _allowed(items, root)):
        parts.append(f"each item {_nested(inner)}")
    entry = _map_entry(node, root)
    if entry is not None and (inner := _allowed(entry, root)):
        parts.append(f"each entry {_nested(inner)}")
    return "; ".join(parts)


def _nested(allowed: str) -> str:
    """The allowed values of an array's items (a map's entries) after "each item"."""
    return f"({allowed})" if ";" in allowed else allowed


def _default(node: Node, required: bool) -> str:
    if "default" in node:
        return _code(node["default"])
    return "required" if required else "(absent)"


def _row(path: str, node: Node, root: Node, required: bool) -> str:
    node = _resolve(node, root)
    cells = [
        _code(path),
        _text(_type(node, root)),
        _default(node, required),
        _allowed(node, root),
        _text(node.get("description", "")),
    ]
    return "| " + " | ".join(cells) + " |"


_HEADER = "| key | type | default | allowed | description |\n|---|---|---|---|---|"


def _alternatives_note(node: Node) -> str:
    """An object's ``oneOf`` of required key sets, as a sentence."""
    alternatives = node.get("oneOf") or ()
    if not alternatives or not all(set(alt) == {"required"} for alt in alternatives):
        return ""
    options = ["`" + "` + `".join(alt["required"]) + "`" for alt in alternatives]
    return "Exactly one of these sets of keys: " + "; ".join(options) + "."


def _objects(path: str, node: Node, root: Node) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every object with properties at or below ``path``, parents first; a map's entries
    are at ``<path>.<name>``."""
    node = _resolve(node, root)
    if "properties" in node:
        yield path, node
        for key, child in node["properties"].items():
            yield from _objects(f"{path}.{key}", child, root)
    elif (entry := _map_entry(node, root)) is not None:
        yield from _objects(f"{path}.{NAME}", entry, root)


def _table(path: str, node: Node, root: Node) -> list[str]:
    required = set(node.get("required", ()))
    rows = [
        _row(f"{path}.{key}", child, root, key in required)
        for key, child in node["properties"].items()
    ]
    return [_HEADER, *rows]


def _section(key: str, node: Node, root: Node, required: bool) -> list[str]:
    node = _resolve(node, root)
    lines = [f"## `{key}`", ""]
    objects = list(_objects(key, node, root))
    if not objects or objects[0][0] != key:
        # A plain value, or a map whose entries are the objects: one row for the key,
        # which carries its description.
        lines += [_HEADER, _row(key, node, root, required), ""]
    else:
        if node.get("description"):
            lines += [_text(node["description"]), ""]
        default = "required" if required else f"default: {_default(node, required)}"
        summary = f"Type: {_type(node, root)}; {default}"
        if allowed := _allowed(node, root):
            summary += f"; allowed: {allowed}"
        lines += [summary + ".", ""]
    for path, obj in objects:
        if path != key:
            lines += [f"### `{path}`", ""]
            if obj.get("description"):
                lines += [_text(obj["description"]), ""]
        if note := _alternatives_note(obj):
            lines += [note, ""]
        lines += [*_table(path, obj, root), ""]
    return lines


def render(schema: dict[str, Any]) -> str:
    """The configuration reference as Markdown, from the config schema (as
    :func:`grabrag.pipeline.config.load_schema` returns it)."""
    required = set(schema.get("required", ()))
    keys = list(schema["properties"])
    lines = [
        "# Configuration reference",
        "",
        f"<!-- Generated from {SCHEMA_PATH}: do not edit. Regenerate with `{REGENERATE}`. -->",
        "",
        "Every key a grabrag config may set, generated from the one JSON schema that checks "
        f"every config (`{SCHEMA_PATH}`), so this page cannot drift from it. Regenerate it "
        f"from the repository root with `{REGENERATE}`; `tests/test_docs.py` fails when it "
        "is out of date. A config is checked before anything runs, and an error names the "
        "offending key. A `--configfile` replaces `config.yaml` instead of being merged "
        f"into it. Keys are given as dotted paths; `{NAME}` stands for a name the config "
        "chooses. "
        "What the shipped configs set is in [configs.md](configs.md).",
        "",
    ]
    if schema.get("description"):
        lines += [_text(schema["description"]), ""]
    lines += [
        "Required top-level keys: " + ", ".join(f"`{k}`" for k in keys if k in required) + ".",
        "",
        "Top-level keys: " + ", ".join(f"[`{k}`](#{k})" for k in keys) + ".",
        "",
    ]
    for key in keys:
        lines += _section(key, schema["properties"][key], schema, key in required)
    return "\n".join(lines).rstrip("\n") + "\n"


def undocumented(schema: Mapping[str, Any]) -> list[str]:
    """The dotted path of every schema property without a non-empty ``description``
    (a ``$ref``'s target's description counts)."""
    missing = []

    def walk(path: str, node: Node) -> None:
        node = _resolve(node, schema)
        for key, child in node.get("properties", {}).items():
            child_path = f"{path}.{key}" if path else key
            if not str(_resolve(child, schema).get("description") or "").strip():
                missing.append(child_path)
            walk(child_path, child)
        entry = _map_entry(node, schema)
        if entry is not None:
            walk(f"{path}.{NAME}", entry)
        items = node.get("items")
        if isinstance(items, Mapping):
            walk(path, items)

    walk("", schema)
    return missing


def main() -> None:
    """Write the reference to stdout: ``python -m grabrag.pipeline.config_doc >
    docs/configuration.md``."""
    from grabrag.pipeline.config import load_schema

    sys.stdout.write(render(load_schema()))


if __name__ == "__main__":
    main()
