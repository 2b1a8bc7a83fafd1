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
- The server proves itself before it is trusted (:mod:`grabrag.generation.served_proof`, a
  file target per served model): a few probe requests that ask for prose under a grammar
  must come back grammar-valid in the configured dialect, or the run stops naming the
  model, the dialect and the reply (servers that accept a constraint and ignore it).
- The server's identity (:func:`~grabrag.generation.served_proof.server_identity`): the
  model id it reports and every fingerprint it exposes (``/v1/models``' ``root``,
  ``max_model_len``, ``meta``, ``owned_by``; llama-server's ``/props`` model path, build
  and window). Its hash is in every row and in every cache key, and a model job whose
  server no longer matches its canary stops: other weights behind the same served name
  never reuse a response or a row. A hosted API's per-response ``system_fingerprint``
  is kept in the row.
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

import http.client
import json
import logging
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from grabrag.generation.batching import Batcher, Request
from grabrag.generation.endpoint_cache import (
    DEFAULT_CACHE,
    EndpointError,
    ResponseCache,
    request_key,
)
from grabrag.generation.json_schema import SchemaError, schema_for, unwrap_label
from grabrag.generation.prompts import GBNF_GRAMMAR
from grabrag.generation.served_proof import (
    check_canary,
    check_window,
    identity_hash,
    run_canary,
    server_identity,
    window_record,
)

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
RETRIED_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
MAX_BACKOFF_S = 60.0


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
        return self.send(
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
            return [self.send(r) for r in requests]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(requests))) as pool:
            return list(pool.map(self.send, requests))

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

    def send(self, request: Request, use_cache: bool = True) -> dict[str, Any]:
        """One call's result row fields; from the cache where it holds the request (and
        ``use_cache``), else from the server, then cached."""
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

    def _request(self, url: str, data: bytes | None) -> urllib.request.Request:
        """A GET (no ``data``) or a POST of JSON, with the key where one is configured."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return urllib.request.Request(
            url, data=data, headers=headers, method="GET" if data is None else "POST"
        )

    def _post(self, path: str, body: Mapping[str, Any] | None) -> dict[str, Any]:
        """One request, retried on 429, 5xx, timeouts, refused connections and broken
        bodies with exponential backoff; then an :class:`EndpointError`."""
        url = self.base_url + path
        data = None if body is None else json.dumps(body).encode("utf-8")
        last = ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                time.sleep(min(MAX_BACKOFF_S, self.backoff_s * 2 ** (attempt - 1)))
            try:
                with urllib.request.urlopen(
                    self._request(url, data), timeout=self.timeout_s
                ) as reply:
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
        props = self._optional_get(self.base_url.removesuffix("/v1") + "/props")
        self.server = server_identity(self.model, entry, props)
        self.server_id = identity_hash(self.server)

    def _optional_get(self, url: str) -> dict[str, Any] | None:
        """One GET of a route only some servers have (llama-server's /props): its JSON
        object, or None for any failure (another server, a 404, not JSON)."""
        try:
            with urllib.request.urlopen(
                self._request(url, None), timeout=min(self.timeout_s, 30)
            ) as reply:
                parsed = json.loads(reply.read().decode("utf-8", errors="replace"))
        except (OSError, ValueError, http.client.HTTPException):
            return None
        return parsed if isinstance(parsed, dict) else None

    def window(self) -> dict[str, Any]:
        """The server's context window beside the run's and the paper's."""
        return window_record(self.server, self.settings.n_ctx)

    def check_window(self) -> None:
        check_window(self)

    def canary(self) -> dict[str, Any]:
        """The canary's probes and record (:func:`grabrag.generation.served_proof.run_canary`)."""
        return run_canary(self)

    def check_canary(self, path: Path) -> None:
        check_canary(self, path)

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
