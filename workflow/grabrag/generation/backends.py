"""Where each configured model runs, decided once: served or local, its asset, its GPU
slot, its threads, and how a job opens it.

A model entry of the config (``models.<name>``) is a GGUF file this job loads with
llama.cpp (``asset``), a served model called through its OpenAI-compatible ``endpoint``
(:mod:`grabrag.generation.endpoint`), or a model of a backend that a config module
declares (``backend``, with :func:`register_backend`). The rules ask
:func:`model_entries` for an entry's asset, threads and GPU slot, the job scripts ask
:func:`open_generator` for the generator, and the NLI verifier asks :func:`verifier_entry`
(and :func:`verifier_endpoint`, :func:`verifier_backend`) whether it labels through its
generator's server or backend.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

# A served model's canary file (rules/endpoint.smk writes it; no table reads it).
CANARY_PATTERN = "results/endpoint/{model}/canary.json"

if TYPE_CHECKING:  # the rules read model entries without loading the generation code
    from grabrag.generation.generator import GenerationSettings


@dataclass(frozen=True)
class Backend:
    """A model backend that a config module declares: ``models.<name>.backend`` names it.

    ``open(name, model, weights, settings, n_threads)`` returns the generator of model
    ``name``: its config entry (``model``; its backend's own settings under ``options``),
    the resolved path of its ``asset`` (None without one), the job's generation settings
    and threads. The generator answers ``complete(messages, grammar=None,
    max_tokens=None)`` with ``raw``, ``finish_reason``, ``prompt_tokens``,
    ``completion_tokens`` and ``seconds``, ``reset()``, ``preflight(calls)`` and has a
    ``batcher`` (None: one call at a time). ``uses_gpu``: its jobs take a GPU slot."""

    name: str
    open: Callable[..., Any]
    uses_gpu: bool = False

    def code_file(self) -> Path:
        """The file that opens it (the code of every job of its models, with the script's)."""
        return Path(inspect.getfile(self.open)).resolve()


_BACKENDS: dict[str, Backend] = {}


def register_backend(backend: Backend) -> Backend:
    """Add ``backend``; a second backend under a registered name is an error."""
    if backend.name in _BACKENDS and _BACKENDS[backend.name] is not backend:
        raise ValueError(f"a model backend named {backend.name} is already registered")
    _BACKENDS[backend.name] = backend
    return backend


def backend_names() -> list[str]:
    """The registered backends' names: what ``models.<name>.backend`` may give."""
    return list(_BACKENDS)


def module_backend(model: Mapping[str, Any]) -> Backend | None:
    """The registered backend a model entry names, or None for a GGUF or a served model."""
    name = model.get("backend")
    if name is None:
        return None
    if name not in _BACKENDS:
        known = ", ".join(_BACKENDS) or "none is registered"
        raise ValueError(f"unknown model backend {name!r} (known: {known})")
    return _BACKENDS[name]


def is_served(model: Mapping[str, Any]) -> bool:
    """Whether a model entry is called through its endpoint (no GGUF, no GPU in the job)."""
    return bool(model.get("endpoint"))


@dataclass(frozen=True)
class ModelEntry:
    """One configured model as the jobs that run it see it.

    A served model's jobs are light HTTP clients: one thread, no GPU slot (the server holds
    the GPUs), so they run side by side and the server batches their requests. A GGUF that
    offloads layers takes a GPU slot; one on the CPU (``n_gpu_layers: 0``) takes none, so
    its jobs run side by side as far as their threads allow instead of queueing for a
    device they do not use."""

    name: str
    settings: Mapping[str, Any]  # the config entry
    served: bool
    asset: str | None  # the GGUF asset; None for a served model
    threads: int
    gpus: int

    @property
    def endpoint(self) -> Mapping[str, Any] | None:
        return self.settings.get("endpoint")

    @property
    def proof(self) -> str | None:
        """What stands for the model among a job's inputs besides its asset: a served
        model's canary file (its jobs wait for it, and rerun when it is made again)."""
        return canary_path(self.name) if self.served else None

    def served_note(self) -> dict[str, Any]:
        """For the tables' note: the server, the model name and the constraint dialect."""
        return {k: self.settings["endpoint"][k] for k in ("base_url", "model", "constraint")}


def model_entry(name: str, model: Mapping[str, Any], local_threads: int) -> ModelEntry:
    """``models.<name>``; ``local_threads``: a local model's threads when it sets none."""
    served = is_served(model)
    backend = module_backend(model)
    if backend is not None:
        gpus = int(backend.uses_gpu)
    else:
        gpus = 0 if served or model.get("n_gpu_layers", 0) == 0 else 1
    return ModelEntry(
        name=name,
        settings=model,
        served=served,
        asset=None if served else model.get("asset"),
        threads=1 if served else (model.get("threads") or local_threads),
        gpus=gpus,
    )


def model_entries(config: Mapping[str, Any], local_threads: int) -> dict[str, ModelEntry]:
    """Every configured model's entry, in the config's order."""
    return {name: model_entry(name, m, local_threads) for name, m in config["models"].items()}


@dataclass(frozen=True)
class VerifierEntry:
    """P4's NLI verifier in the cells of one generator model. The llm verifier with no
    asset of its own labels with its generator: its GGUF, with its ``n_gpu_layers`` and
    threads, or its endpoint when the generator is served; a transformers model may sit on
    a GPU (``nli.device``), so it keeps its slot."""

    served: bool
    asset: str | None  # the verifier's weights; None when it labels through a server
    threads: int
    gpus: int


def verifier_endpoint(nli: Mapping[str, Any], model: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The endpoint the verifier labels through: the generator's, for the llm backend with
    no asset of its own and a served generator; else None (it loads its own weights)."""
    if nli["backend"] == "llm" and not nli["asset"]:
        return model.get("endpoint") or None
    return None


def verifier_backend(nli: Mapping[str, Any], model: Mapping[str, Any]) -> Backend | None:
    """The module backend the verifier labels through: the generator's, for the llm backend
    with no asset of its own and a generator of a module's backend; else None."""
    if nli["backend"] == "llm" and not nli["asset"]:
        return module_backend(model)
    return None


def verifier_entry(
    nli: Mapping[str, Any], generator: ModelEntry, local_threads: int
) -> VerifierEntry:
    """The verifier of ``generator``'s cells under the config's ``nli`` section."""
    served = verifier_endpoint(nli, generator.settings) is not None
    if served:
        threads = 1
    elif nli["backend"] == "llm" and not generator.served:
        threads = generator.threads
    else:
        threads = local_threads
    return VerifierEntry(
        served=served,
        asset=None if served else (nli["asset"] or generator.asset),
        threads=threads,
        gpus=generator.gpus if nli["backend"] == "llm" else 1,
    )


def open_generator(
    name: str,
    model: Mapping[str, Any],
    model_input: Any,
    settings: GenerationSettings,
    n_threads: int,
    cached: bool = True,
) -> Any:
    """The generator of ``models.<name>``: a served model (its ``endpoint``, see
    :mod:`grabrag.generation.endpoint`), a model of a module's backend (:class:`Backend`)
    or its GGUF file loaded in this process. All answer ``complete``, ``reset``,
    ``preflight`` and ``batcher`` alike. ``model_input``: what the
    rule's ``model`` input holds (``model_input`` in rules/common.smk, from
    :attr:`ModelEntry.proof`): a local model's asset manifest, a served model's canary
    file. ``cached``: whether a served model's responses come from (and go to) the response
    cache; the re-ask audit sends its calls again for real."""
    from grabrag.data.assets import given_path

    given = given_path(model_input)
    backend = module_backend(model)
    if backend is not None:
        from grabrag.data.assets import resolve_given

        return backend.open(name, model, resolve_given(model_input), settings, n_threads)
    if is_served(model):
        from grabrag.generation.endpoint import EndpointGenerator

        if cached:
            return EndpointGenerator(name, model["endpoint"], settings, canary=given)
        return EndpointGenerator(name, model["endpoint"], settings, cache_path=None, canary=given)
    from grabrag.data.assets import resolve
    from grabrag.generation.generator import GenerationError, LlamaGenerator

    if given is None:
        raise GenerationError(f"models.{name}: neither a GGUF asset nor an endpoint to call")

    return LlamaGenerator.for_model(resolve(given), settings, model, n_threads)


def canary_path(name: str) -> str:
    """The canary file of served model ``name`` (what :meth:`EndpointGenerator.canary`
    proved: its identity, its window, the probes' replies)."""
    return CANARY_PATTERN.format(model=name)
