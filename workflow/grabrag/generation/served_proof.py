"""What a served model proves before its answers are trusted
(:class:`grabrag.generation.endpoint.EndpointGenerator` calls these).

- Its identity (:func:`server_identity`): the model id the server reports and every
  fingerprint it exposes (``/v1/models``' ``root``, ``max_model_len``, ``meta``,
  ``owned_by``; llama-server's ``/props`` model path, build, window and chat template).
  Its hash (:func:`identity_hash`) is in every row and every cache key.
- Its window (:func:`check_window`): one smaller than the run's ``generation.n_ctx`` is a
  named config error before any call.
- The canary (:func:`run_canary`): probes that ask for prose under a grammar must come
  back as the grammar allows (:func:`grammar_verdict`) in the configured dialect, or the
  run stops naming the model, the dialect and the reply; every later job checks that its
  server still has the identity its canary proved (:func:`check_canary`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from grabrag.core.errors import GrabragError
from grabrag.generation.batching import Request
from grabrag.generation.endpoint_cache import EndpointError
from grabrag.generation.json_schema import LABEL, schema_for
from grabrag.generation.prompts import GBNF_GRAMMAR

log = logging.getLogger("grabrag")


class ServedClient(Protocol):
    """What the checks read of :class:`grabrag.generation.endpoint.EndpointGenerator`."""

    name: str  # the config's model name
    model: str  # the served model's name
    host: str
    dialect: str
    settings: Any  # GenerationSettings
    server: dict[str, Any]  # the server's identity
    server_id: str  # its hash

    def send(self, request: Request, use_cache: bool = True) -> dict[str, Any]: ...


# The paper's context window (n_ctx 4096), recorded beside the one the server uses.
PAPER_WINDOW = 4096
# The canary's probes: each asks for prose, which any of these grammars refuses, so a
# server that ignores the constraint answers with something the grammar does not accept.
# A choice of two words always finishes within a few tokens; the paper's grammar is the
# one most calls carry.
CANARY_WORDS_GRAMMAR = 'root ::= "yes" | "no"\n'
CANARY_PROMPT = (
    "Do not answer yes or no and do not write JSON. Write a long paragraph of plain prose "
    "about the sea, its colours and its sounds."
)
CANARY_PROBES = (("words", CANARY_WORDS_GRAMMAR), ("paper", GBNF_GRAMMAR))
CANARY_MAX_TOKENS = 512
# What of a /v1/models entry says which weights answer (vLLM: root, max_model_len, parent;
# llama-server: meta, with the parameter count, size and training window). Not its
# `created` (vLLM stamps the time of the request) nor its permissions (random ids).
MODEL_FINGERPRINTS = ("root", "parent", "owned_by", "max_model_len", "meta")


def identity_hash(identity: Mapping[str, Any]) -> str:
    """A short stable name of a server identity, for rows and cache keys."""
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def server_window(identity: Mapping[str, Any]) -> int | None:
    """The context window the server reports (vLLM's max_model_len, llama-server's n_ctx),
    or None where it reports none (llama-cpp-python's server, hosted APIs)."""
    for key in ("max_model_len", "props.n_ctx"):
        value = identity.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


class CanaryError(GrabragError):
    """A served model's server answered a probe with what its grammar refuses: it ignores
    the constraint, so no cell is computed on it."""


# The canary's verdicts on a probe's reply.
VALID = "valid"  # what the grammar allows
PARTLY_APPLIED = "partly_applied"  # the grammar's shape, but a number out of its range
REFUSED = "refused"  # what the grammar refuses: the constraint was ignored


def grammar_verdict(grammar: str, raw: str, finish_reason: str | None) -> str:
    """Whether a probe's reply is what ``grammar`` allows (:data:`VALID`): the JSON (or
    word) its schema describes; a reply cut at the token limit passes when it opens as the
    grammar must (the object's first field), since a constraint-ignoring server writes the
    asked-for prose from the first token. A reply of the right shape with a number outside
    the grammar's range is :data:`PARTLY_APPLIED` (llama-cpp-python's server turns a JSON
    schema into a grammar without ``minimum``/``maximum``): such an output is a counted
    parse failure of its row, never a silent answer, so it is recorded, not stopped."""
    import jsonschema

    schema, is_label = schema_for(grammar)
    if is_label:
        return VALID if raw.strip() in schema["properties"][LABEL]["enum"] else REFUSED
    first = next(iter(schema["properties"]))
    if finish_reason == "length":
        opens = re.match(r'\{\s*"' + re.escape(first) + r'":', raw)
        return VALID if opens else REFUSED
    try:
        # strict=False: the grammars allow control characters (a tab) inside strings
        reply = json.loads(raw, strict=False)
    except json.JSONDecodeError:
        return REFUSED
    unbounded = {
        **schema,
        "properties": {
            name: {k: v for k, v in field.items() if k not in ("minimum", "maximum")}
            for name, field in schema["properties"].items()
        },
    }
    for verdict, against in ((VALID, schema), (PARTLY_APPLIED, unbounded)):
        try:
            jsonschema.validate(reply, against)
        except jsonschema.ValidationError:
            continue
        return verdict
    return REFUSED


def server_identity(
    model: str, entry: Mapping[str, Any], props: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Who answers as ``model``: its /v1/models ``entry``'s fingerprints and, where the
    server has llama-server's /props (``props``), the model file, the build, the window and
    a hash of the chat template it applies."""
    identity: dict[str, Any] = {"model": model}
    identity.update({k: entry[k] for k in MODEL_FINGERPRINTS if k in entry})
    if props:
        settings = props.get("default_generation_settings") or {}
        n_ctx = settings.get("n_ctx", props.get("n_ctx"))
        for key, value in (
            ("props.model_path", props.get("model_path")),
            ("props.build_info", props.get("build_info")),
            ("props.n_ctx", n_ctx),
            ("props.total_slots", props.get("total_slots")),
        ):
            if value is not None:
                identity[key] = value
        template = props.get("chat_template")
        if isinstance(template, str) and template:
            identity["props.chat_template_sha256"] = hashlib.sha256(
                template.encode("utf-8")
            ).hexdigest()
    return identity


def window_record(server: Mapping[str, Any], n_ctx: int) -> dict[str, Any]:
    """The server's context window beside the run's and the paper's."""
    return {"server": server_window(server), "configured": n_ctx, "paper": PAPER_WINDOW}


def check_window(generator: ServedClient) -> None:
    """Where the server reports its context window, one smaller than the run's
    ``generation.n_ctx`` is a config error: prompts are built to fit ``n_ctx`` with
    ``max_tokens`` to spare, and a server that cuts them answers another question."""
    g, settings = generator, generator.settings
    window = server_window(g.server)
    if window is None:
        log.info(
            "model %s: %s reports no context window; generation.n_ctx %d is assumed "
            "(a prompt that does not fit comes back as a named HTTP 400)",
            g.name,
            g.host,
            settings.n_ctx,
        )
    elif window < settings.n_ctx:
        raise EndpointError(
            f"models.{g.name}: {g.host} serves {g.model!r} with a context window "
            f"of {window} tokens, smaller than generation.n_ctx {settings.n_ctx} "
            f"that the prompts and max_tokens {settings.max_tokens} are sized for "
            f"(the paper's: {PAPER_WINDOW}). Relaunch the server with a window of "
            f"{settings.n_ctx} (vLLM: --max-model-len {settings.n_ctx}; "
            f"SGLang: --context-length {settings.n_ctx}; llama-server: "
            f"-c {settings.n_ctx}) or lower generation.n_ctx"
        )


def run_canary(generator: ServedClient) -> dict[str, Any]:
    """Send the canary's probes (:data:`CANARY_PROBES`), uncached, in the configured
    dialect; a reply its grammar refuses is a :class:`CanaryError` naming the model, the
    dialect and the reply. Under ``constraint: none`` nothing is constrained, so nothing is
    proven: the probes are sent and recorded, and the run counts the outputs it cannot
    parse as it always does. Returns the canary's record."""
    g = generator
    probes = []
    for probe, grammar in CANARY_PROBES:
        request = Request([{"role": "user", "content": CANARY_PROMPT}], grammar, CANARY_MAX_TOKENS)
        result = g.send(request, use_cache=False)
        verdict = grammar_verdict(grammar, result["raw"], result["finish_reason"])
        probes.append(
            {
                "probe": probe,
                "verdict": verdict,
                "finish_reason": result["finish_reason"],
                "reply": result["raw"][:500],
                "system_fingerprint": result["served"].get("system_fingerprint"),
            }
        )
        if verdict == PARTLY_APPLIED and g.dialect != "none":
            log.warning(
                "model %s: %s applied the shape of the %s constraint but not a number's "
                "range (probe %r: %r); such outputs count as parse failures",
                g.name,
                g.host,
                g.dialect,
                probe,
                result["raw"][:200],
            )
        if verdict == REFUSED and g.dialect != "none":
            raise CanaryError(
                f"models.{g.name}: {g.host} ignored the {g.dialect!r} constraint "
                f"of model {g.model!r}: the canary's {probe!r} probe, which asks for "
                f"prose under a grammar that refuses it, came back "
                f"{result['raw'][:200]!r} (finish_reason {result['finish_reason']!r}). "
                f"No cell was computed. Set models.{g.name}.endpoint.constraint to the "
                "dialect this server applies (gbnf for llama-server, vllm, sglang, "
                "json_schema for hosted APIs), or check that the server was launched with "
                "structured outputs enabled"
            )
    return {
        "model": g.name,
        "served_model": g.model,
        "host": g.host,
        "constraint": g.dialect,
        "proven": g.dialect != "none",
        "fully_applied": all(p["verdict"] == VALID for p in probes),
        "identity": g.server,
        "identity_hash": g.server_id,
        "window": window_record(g.server, g.settings.n_ctx),
        "probes": probes,
    }


def check_canary(generator: ServedClient, path: Path) -> None:
    """The server must still be the one its canary proved: other weights, another build
    or another window behind the same served name is a named error, so that no row of the
    new server is mixed with the old one's."""
    g = generator
    try:
        proven = json.loads(path.read_text(encoding="utf-8"))["identity_hash"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise EndpointError(
            f"models.{g.name}: the canary file {path} cannot be read ({error}); "
            "delete it and rerun, so the canary runs again"
        ) from None
    if g.server and proven != g.server_id:
        raise EndpointError(
            f"models.{g.name}: {g.host} no longer is the server its canary proved "
            f"({path}: identity {proven}; now {g.server_id}: {g.server}). Other "
            "weights, another build or another window answer under the same name, so "
            "no cached response or finished row of the old one is reused: rerun the "
            "canary and every cell of this model with `snakemake --forcerun "
            "endpoint_canary` (add your usual options)"
        )
