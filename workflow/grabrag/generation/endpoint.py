"""A model behind an OpenAI-compatible server (vLLM, SGLang, llama.cpp's servers, a hosted
API) instead of a GGUF file run inside the job.

:class:`EndpointGenerator` answers the same calls as
:class:`grabrag.generation.generator.LlamaGenerator` (``complete``, ``reset``,
``preflight``, ``batcher``), so every stage that calls a model runs unchanged on either.

- The paper's prompts go verbatim as chat messages, greedy (the configured temperature,
  0), the configured seed and max tokens; the grammar of the call goes in the server's
  constraint dialect (:data:`DIALECTS`).
- Concurrency: with ``concurrency`` above 1 the job's per-question code runs in the fixed
  groups of :class:`grabrag.generation.batching.Batcher`, and each round's calls go out
  side by side, so the serving engine batches them. What goes out together depends on the
  group only, and rows come back in question order whatever order the responses arrive in.
- The server proves itself before it is trusted (:meth:`EndpointGenerator.canary`, a
  file target per served model): a few probe requests that ask for prose under a grammar
  must come back grammar-valid in the configured dialect, or the run stops naming the
  model, the dialect and the reply (servers that accept a constraint and ignore it).
- The server's identity (:meth:`EndpointGenerator.identity`): the model id it reports and
  every fingerprint it exposes (``/v1/models``' ``root``, ``max_model_len``, ``meta``,
  ``owned_by``; llama-server's ``/props`` model path, build and window). Its hash is in
  every row and in every cache key, and a model job whose server no longer matches its
  canary stops: other weights behind the same served name never reuse a response or a
  row. A hosted API's per-response ``system_fingerprint`` is kept in the row.
- The context window: where the server reports it, a window smaller than the run's
  ``generation.n_ctx`` (the paper's 4096) is a named config error before any call.
- Every response is cached on disk (SQLite) under the hash of the full request (model
  name, messages, decoding settings, constraint) and the server's identity: a rerun after
  a downstream change or a crash never pays for a call twice, and a cache hit says so in
  its row and reports the call's original latency, so that cost tables are not made of
  0 s lookups.
- Faults are named (:class:`EndpointError`): connection refused, 401/403 (naming the key's
  variable), an unknown model (naming it and what the server serves), 429 and 5xx and
  timeouts (retried with backoff, then an error), a body that is not the JSON of a chat
  completion, a server that refuses the constraint.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import re
import socket
import sqlite3
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from grabrag.core.errors import GrabragError
from grabrag.generation.batching import Batcher, Request
from grabrag.generation.json_schema import LABEL, SchemaError, schema_for, unwrap_label
from grabrag.generation.prompts import GBNF_GRAMMAR

log = logging.getLogger("grabrag")

BACKEND = "endpoint"
# How each kind of server takes a grammar-constrained greedy request: the request's extra
# fields for a GBNF grammar string. The self-hosted dialects also switch off the server's
# own repetition penalty, which several servers apply by default (llama-cpp-python's
# server: 1.1) and which changes which token is the argmax, so greedy decoding matches the
# in-process path; OpenAI's API has no such penalty and refuses fields it does not know.
DIALECTS = {
    # llama.cpp's llama-server and llama-cpp-python's server: a GBNF string in "grammar".
    "gbnf": lambda gbnf: {"grammar": gbnf, "repeat_penalty": 1.0},
    # vLLM's structured outputs (xgrammar reads GBNF).
    "vllm": lambda gbnf: {"structured_outputs": {"grammar": gbnf}, "repetition_penalty": 1.0},
    # SGLang's constrained decoding (EBNF in the GBNF notation).
    "sglang": lambda gbnf: {"ebnf": gbnf, "repetition_penalty": 1.0},
    # OpenAI's structured outputs: the JSON schema equivalent of the call's grammar (only
    # OpenAI's own fields, as for "none").
    "json_schema": lambda gbnf: {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "grabrag", "strict": True, "schema": schema_for(gbnf)[0]},
        }
    },
    # No constraint, and only the fields of OpenAI's own chat API (a hosted API refuses
    # fields it does not know): the prompts still ask for the format, and every output the
    # parser cannot read is counted per cell as a parse failure, as in-process fallbacks are.
    "none": lambda gbnf: {},
}
# Where the response cache lives when the caller names none (relative to the working
# directory: the workflow's, for rule jobs).
DEFAULT_CACHE = Path("results/endpoint-cache/responses.sqlite")
RETRIED_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_BACKOFF_S = 60.0
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


class EndpointError(GrabragError):
    """A served model cannot answer: the message names the server, the model or the key
    variable, and what to do."""


class ResponseCache:
    """Finished responses by request hash, with the seconds each call took, in one SQLite
    file shared by the jobs of a run (WAL mode and a busy timeout let parallel jobs write
    it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(path, timeout=60, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS calls "
                "(key TEXT PRIMARY KEY, body TEXT NOT NULL, seconds REAL NOT NULL)"
            )
            self._db.commit()
        except sqlite3.DatabaseError as error:
            raise EndpointError(
                f"the endpoint response cache {path} cannot be opened ({error}); delete it "
                "to start an empty one (finished rows are kept in the results)"
            ) from None

    def get(self, key: str) -> tuple[dict[str, Any], float] | None:
        """The response and the seconds its call took, or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT body, seconds FROM calls WHERE key = ?", (key,)
            ).fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0]), float(row[1])
        except json.JSONDecodeError:
            return None

    def put(self, key: str, body: Mapping[str, Any], seconds: float) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO calls (key, body, seconds) VALUES (?, ?, ?)",
                (key, json.dumps(body, sort_keys=True), seconds),
            )
            self._db.commit()


def request_key(body: Mapping[str, Any], identity: str = "") -> str:
    """The cache key of a request: the hash of its canonical JSON (model, messages,
    decoding settings, constraint; not the server's address or the key) and of the
    server's identity (:meth:`EndpointGenerator.identity`), so that other weights behind
    the same served name never answer from the cache."""
    text = json.dumps({"request": body, "server": identity}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


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


class EndpointGenerator:
    """Greedy, grammar-constrained chat completions from an OpenAI-compatible server."""

    backend = BACKEND

    def __init__(
        self,
        name: str,
        endpoint: Mapping[str, Any],
        settings: Any,
        cache_path: Path | None = DEFAULT_CACHE,
        check: bool = True,
        canary: Path | None = None,
    ) -> None:
        """``check``: ask the server who it is before any call (its models, its identity,
        its window); ``canary``: the canary file of this model (``results/endpoint/
        <model>/canary.json``), whose proven identity the server must still have."""
        self.name = name
        self.settings = settings
        self.base_url = endpoint["base_url"].rstrip("/")
        self.model = endpoint["model"]
        self.dialect = endpoint.get("constraint", "gbnf")
        if self.dialect not in DIALECTS:
            raise EndpointError(
                f"models.{name}.endpoint.constraint: unknown dialect {self.dialect!r}; "
                f"known: {', '.join(DIALECTS)}"
            )
        self.key_variable = endpoint.get("api_key_env")
        self.api_key = None
        if self.key_variable:
            self.api_key = os.environ.get(self.key_variable)
            if not self.api_key:
                raise EndpointError(
                    f"models.{name}.endpoint.api_key_env names {self.key_variable}, which is "
                    "not set (or empty) in this environment; export it before running"
                )
        self.concurrency = int(endpoint.get("concurrency", 1))
        self.timeout_s = float(endpoint.get("timeout_s", 600))
        self.max_retries = int(endpoint.get("max_retries", 5))
        self.backoff_s = float(endpoint.get("backoff_s", 1.0))
        self.host = urllib.parse.urlsplit(self.base_url).netloc
        if settings.temperature != 0 and self.concurrency > 1:
            raise EndpointError(
                f"models.{name}.endpoint.concurrency {self.concurrency} needs greedy decoding, "
                f"but generation.temperature is {settings.temperature}"
            )
        self.cache = ResponseCache(cache_path) if cache_path is not None else None
        # The batch a row records: calls sent side by side (a resumed job keeps rows made
        # at the same concurrency, as the in-process path keeps rows of the same batch).
        self.batch = self.concurrency
        self.batcher: Batcher[Any, Any] | None = None
        if self.concurrency > 1:
            self.batcher = Batcher(
                self.concurrency, self.complete_many, GBNF_GRAMMAR, settings.max_tokens
            )
        self.calls = 0
        log.info(
            "model %s served by %s as %s (constraint %s, concurrency %d): no device in this job",
            name,
            self.host,
            self.model,
            self.dialect,
            self.concurrency,
        )
        self.cache_hits = 0
        # the server's identity (see identity()); empty until asked
        self.server: dict[str, Any] = {}
        self.server_id = ""
        if check:
            self.check_model()
            self.check_window()
        if canary is not None:
            self.check_canary(canary)

    # --- the generator interface ----------------------------------------------------------

    def reset(self) -> None:
        """Nothing to reset: every request carries its whole conversation."""

    def preflight(self, calls: Iterable[tuple[str, list[dict[str, str]]]]) -> None:
        """The server holds the tokenizer and the context window: a prompt that does not
        fit comes back as a 400 naming the call (see :meth:`_post`)."""

    def complete(
        self,
        messages: list[dict[str, str]],
        grammar: str | None = None,
        max_tokens: int | None = None,
    ) -> dict[str, Any]:
        if self.batcher is not None and self.batcher.active():
            return self.batcher.complete(messages, grammar, max_tokens)
        return self._call(
            Request(
                messages,
                GBNF_GRAMMAR if grammar is None else grammar,
                self.settings.max_tokens if max_tokens is None else max_tokens,
            )
        )

    def complete_many(self, requests: Sequence[Request]) -> list[dict[str, Any]]:
        """Every request at once (up to ``concurrency`` in flight); results in request
        order."""
        if len(requests) <= 1:
            return [self._call(r) for r in requests]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as pool:
            return list(pool.map(self._call, requests))

    # --- one request ------------------------------------------------------------------------

    def request_body(self, request: Request) -> dict[str, Any]:
        try:
            constraint = DIALECTS[self.dialect](request.grammar)
        except SchemaError as error:
            raise EndpointError(
                f"models.{self.name}.endpoint.constraint json_schema: this call's grammar has "
                f"no JSON schema equivalent ({error}); use a dialect that takes the grammar "
                "itself (gbnf, vllm, sglang)"
            ) from None
        return {
            "model": self.model,
            "messages": request.messages,
            "temperature": self.settings.temperature,
            "top_p": 1.0,
            "presence_penalty": 0.0,
            "frequency_penalty": 0.0,
            "seed": self.settings.seed,
            "max_tokens": request.max_tokens,
            **constraint,
        }

    def _call(self, request: Request, use_cache: bool = True) -> dict[str, Any]:
        body = self.request_body(request)
        key = request_key(body, self.server_id)
        cache = self.cache if use_cache else None
        started = time.perf_counter()
        cached = cache.get(key) if cache is not None else None
        if cached is not None:
            response, seconds = cached
        else:
            response = self._post("/chat/completions", body)
            seconds = round(time.perf_counter() - started, 3)
        result = self._result(response, seconds, cached is not None)
        if cached is not None:
            # the row's seconds stay the call's own (cost tables, EvidentialRAG's Eq. 28);
            # what the lookup took is said beside them
            result["served"]["lookup_seconds"] = round(time.perf_counter() - started, 3)
        if self.dialect == "json_schema" and schema_for(request.grammar)[1]:
            # a bare choice of words was asked for as {"label": word}: the stage parses the
            # word, as under the grammar itself
            result["raw"] = unwrap_label(result["raw"])
        if cached is None and cache is not None:
            cache.put(key, response, seconds)
        self.calls += 1
        self.cache_hits += cached is not None
        return result

    def _result(self, response: Mapping[str, Any], seconds: float, cached: bool) -> dict:
        try:
            choice = response["choices"][0]
            raw = choice["message"].get("content") or ""
            usage = response.get("usage") or {}
        except (KeyError, IndexError, TypeError, AttributeError):
            raise EndpointError(
                f"{self.base_url}/chat/completions answered model {self.model!r} with JSON that "
                f"is not a chat completion (no choices[0].message): {str(response)[:300]}"
            ) from None
        return {
            "raw": raw,
            "finish_reason": choice.get("finish_reason"),
            "prompt_tokens": usage.get("prompt_tokens"),
            "completion_tokens": usage.get("completion_tokens"),
            "seconds": seconds,
            "served": {
                "backend": BACKEND,
                "host": self.host,
                "model": response.get("model", self.model),
                "constraint": self.dialect,
                "cached": cached,
                "identity": self.server_id,
                **(
                    {"system_fingerprint": response["system_fingerprint"]}
                    if response.get("system_fingerprint")
                    else {}
                ),
            },
        }

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return headers

    def _post(self, path: str, body: Mapping[str, Any] | None) -> dict[str, Any]:
        """One request, retried on 429, 5xx, timeouts, refused connections and broken
        bodies with exponential backoff; then an :class:`EndpointError`."""
        url = self.base_url + path
        data = None if body is None else json.dumps(body).encode("utf-8")
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(min(MAX_BACKOFF_S, self.backoff_s * 2 ** (attempt - 1)))
            request = urllib.request.Request(
                url, data=data, headers=self._headers(), method="GET" if data is None else "POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
                    text = reply.read().decode("utf-8", errors="replace")
            except urllib.error.HTTPError as error:
                detail = _error_detail(error)
                if error.code in (401, 403):
                    raise EndpointError(self._auth_message(error.code, detail)) from None
                if error.code == 404:
                    raise EndpointError(
                        f"{url} answered 404 ({detail}): the server does not serve model "
                        f"{self.model!r} there; check models.{self.name}.endpoint.model and "
                        "base_url (it ends in /v1)"
                    ) from None
                if error.code in RETRIED_STATUSES:
                    last = f"HTTP {error.code} ({detail})"
                    log.warning("%s: %s, attempt %d", url, last, attempt + 1)
                    continue
                if error.code in (400, 422) and _mentions_constraint(detail, self.dialect):
                    raise EndpointError(
                        f"{url} refused the {self.dialect!r} constraint ({detail}); set "
                        f"models.{self.name}.endpoint.constraint to the dialect this server "
                        f"speaks (one of {', '.join(DIALECTS)})"
                    ) from None
                raise EndpointError(
                    f"{url} refused a request for model {self.model!r} with HTTP {error.code}: "
                    f"{detail}. A prompt longer than the server's context window ends here: "
                    "raise the server's context length or lower contexts.max_context_tokens"
                ) from None
            except TimeoutError:
                last = f"no answer within timeout_s {self.timeout_s:g}"
                log.warning("%s: %s, attempt %d", url, last, attempt + 1)
                continue
            except urllib.error.URLError as error:
                reason = error.reason
                if isinstance(reason, TimeoutError | socket.timeout):
                    last = f"no answer within timeout_s {self.timeout_s:g}"
                else:
                    last = f"cannot connect ({reason})"
                log.warning("%s: %s, attempt %d", url, last, attempt + 1)
                continue
            except (http.client.HTTPException, ConnectionError) as error:
                last = f"the connection broke off ({type(error).__name__}: {error})"
                log.warning("%s: %s, attempt %d", url, last, attempt + 1)
                continue
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError:
                last = f"a body that is not JSON ({len(text)} bytes: {text[:120]!r})"
                log.warning("%s: %s, attempt %d", url, last, attempt + 1)
                continue
            if not isinstance(parsed, dict):
                last = f"JSON that is not an object: {text[:120]!r}"
                continue
            return parsed
        attempts = self.max_retries + 1
        raise EndpointError(
            f"{url} (model {self.model!r}) failed {attempts} attempt"
            f"{'s' if attempts > 1 else ''}: {last}. "
            f"Is the server running and reachable from this node? Finished rows are kept; "
            f"rerun to resume (models.{self.name}.endpoint.max_retries and timeout_s set "
            "how long to wait)"
        )

    def _auth_message(self, code: int, detail: str) -> str:
        if self.key_variable:
            return (
                f"{self.base_url} refused the API key in ${self.key_variable} (HTTP {code}: "
                f"{detail}); set {self.key_variable} to a key this server accepts"
            )
        return (
            f"{self.base_url} asks for an API key (HTTP {code}: {detail}); put the key in an "
            f"environment variable and name it in models.{self.name}.endpoint.api_key_env"
        )

    def check_model(self) -> None:
        """Fail before any work when the server is unreachable, refuses the key, or does
        not list the configured model under /v1/models; then learn the server's
        identity."""
        listed = self._post("/models", None)
        entries = [m for m in listed.get("data", []) if isinstance(m, dict)]
        served = [m.get("id") for m in entries]
        if served and self.model not in served:
            raise EndpointError(
                f"{self.base_url} does not serve model {self.model!r} (it serves: "
                f"{', '.join(map(str, served))}); set models.{self.name}.endpoint.model to one "
                "of those"
            )
        entry = next((m for m in entries if m.get("id") == self.model), {})
        self.server = self.identity(entry)
        self.server_id = identity_hash(self.server)

    def identity(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        """Who answers: the served model's id and every fingerprint the server exposes
        (``entry``: its /v1/models entry; llama-server's /props at the server's root: the
        model file, the build, the window and a hash of the chat template it applies)."""
        identity: dict[str, Any] = {"model": self.model}
        identity.update({k: entry[k] for k in MODEL_FINGERPRINTS if k in entry})
        props = self._optional_get(self.base_url.removesuffix("/v1") + "/props")
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

    def _optional_get(self, url: str) -> dict[str, Any] | None:
        """One GET of a route only some servers have (llama-server's /props): its JSON
        object, or None for any failure (another server, a 404, not JSON)."""
        request = urllib.request.Request(url, headers=self._headers(), method="GET")
        try:
            with urllib.request.urlopen(request, timeout=min(self.timeout_s, 30)) as reply:
                parsed = json.loads(reply.read().decode("utf-8", errors="replace"))
        except (OSError, ValueError, http.client.HTTPException):
            return None
        return parsed if isinstance(parsed, dict) else None

    def window(self) -> dict[str, Any]:
        """The server's context window beside the run's and the paper's."""
        return {
            "server": server_window(self.server),
            "configured": self.settings.n_ctx,
            "paper": PAPER_WINDOW,
        }

    def check_window(self) -> None:
        """Where the server reports its context window, one smaller than the run's
        ``generation.n_ctx`` is a config error: prompts are built to fit ``n_ctx`` with
        ``max_tokens`` to spare, and a server that cuts them answers another question."""
        window = server_window(self.server)
        if window is None:
            log.info(
                "model %s: %s reports no context window; generation.n_ctx %d is assumed "
                "(a prompt that does not fit comes back as a named HTTP 400)",
                self.name,
                self.host,
                self.settings.n_ctx,
            )
        elif window < self.settings.n_ctx:
            raise EndpointError(
                f"models.{self.name}: {self.host} serves {self.model!r} with a context window "
                f"of {window} tokens, smaller than generation.n_ctx {self.settings.n_ctx} "
                f"that the prompts and max_tokens {self.settings.max_tokens} are sized for "
                f"(the paper's: {PAPER_WINDOW}). Relaunch the server with a window of "
                f"{self.settings.n_ctx} (vLLM: --max-model-len {self.settings.n_ctx}; "
                f"SGLang: --context-length {self.settings.n_ctx}; llama-server: "
                f"-c {self.settings.n_ctx}) or lower generation.n_ctx"
            )

    def canary(self) -> dict[str, Any]:
        """Send the canary's probes (:data:`CANARY_PROBES`), uncached, in the configured
        dialect; a reply its grammar refuses is a :class:`CanaryError` naming the model,
        the dialect and the reply. Under ``constraint: none`` nothing is constrained, so
        nothing is proven: the probes are sent and recorded, and the run counts the
        outputs it cannot parse as it always does. Returns the canary's record."""
        probes = []
        for probe, grammar in CANARY_PROBES:
            request = Request(
                [{"role": "user", "content": CANARY_PROMPT}], grammar, CANARY_MAX_TOKENS
            )
            result = self._call(request, use_cache=False)
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
            if verdict == PARTLY_APPLIED and self.dialect != "none":
                log.warning(
                    "model %s: %s applied the shape of the %s constraint but not a number's "
                    "range (probe %r: %r); such outputs count as parse failures",
                    self.name,
                    self.host,
                    self.dialect,
                    probe,
                    result["raw"][:200],
                )
            if verdict == REFUSED and self.dialect != "none":
                raise CanaryError(
                    f"models.{self.name}: {self.host} ignored the {self.dialect!r} constraint "
                    f"of model {self.model!r}: the canary's {probe!r} probe, which asks for "
                    f"prose under a grammar that refuses it, came back "
                    f"{result['raw'][:200]!r} (finish_reason {result['finish_reason']!r}). "
                    "No cell was computed. Set models."
                    f"{self.name}.endpoint.constraint to the dialect this server applies "
                    "(gbnf for llama-server, vllm, sglang, json_schema for hosted APIs), or "
                    "check that the server was launched with structured outputs enabled"
                )
        return {
            "model": self.name,
            "served_model": self.model,
            "host": self.host,
            "constraint": self.dialect,
            "proven": self.dialect != "none",
            "fully_applied": all(p["verdict"] == VALID for p in probes),
            "identity": self.server,
            "identity_hash": self.server_id,
            "window": self.window(),
            "probes": probes,
        }

    def check_canary(self, path: Path) -> None:
        """The server must still be the one its canary proved: other weights, another
        build or another window behind the same served name is a named error, so that no
        row of the new server is mixed with the old one's."""
        try:
            proven = json.loads(path.read_text(encoding="utf-8"))["identity_hash"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise EndpointError(
                f"models.{self.name}: the canary file {path} cannot be read ({error}); "
                "delete it and rerun, so the canary runs again"
            ) from None
        if self.server and proven != self.server_id:
            raise EndpointError(
                f"models.{self.name}: {self.host} no longer is the server its canary proved "
                f"({path}: identity {proven}; now {self.server_id}: {self.server}). Other "
                "weights, another build or another window answer under the same name, so "
                "no cached response or finished row of the old one is reused: rerun the "
                "canary and every cell of this model with `snakemake --forcerun "
                "endpoint_canary` (add your usual options)"
            )

    def report(self) -> dict[str, Any]:
        return {
            "backend": BACKEND,
            "host": self.host,
            "model": self.model,
            "constraint": self.dialect,
            "identity": self.server_id,
            "calls": self.calls,
            "cache_hits": self.cache_hits,
        }


def _error_detail(error: urllib.error.HTTPError) -> str:
    try:
        text = error.read().decode("utf-8", errors="replace")
    except OSError:
        text = ""
    try:
        body = json.loads(text)
        message = body.get("error", body.get("detail", body))
        if isinstance(message, dict):
            message = message.get("message", message)
        text = str(message)
    except (json.JSONDecodeError, AttributeError):
        pass
    return (text or error.reason or "no detail")[:300]


def _mentions_constraint(detail: str, dialect: str) -> bool:
    words = {"grammar", "structured", "guided", "ebnf", "response_format", dialect}
    lowered = detail.lower()
    return any(word in lowered for word in words)
