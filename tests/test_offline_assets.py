"""No hidden hub downloads, and hub assets pinned to what their first fetch saw.

* Every backend that loads a model (GLiNER, the transformers NLI verifier, the
  sentence-transformers encoder and the context tokenizer) is loaded from asset folders in
  a fresh interpreter with ``HF_HUB_OFFLINE=1``, an empty ``HF_HOME``, ``HF_ENDPOINT`` on a
  closed local port and every socket connection refused and recorded: a load that would
  reach for the hub fails, and the test also asserts that nothing tried. The models are
  tiny random ones built here (GLiNER, DeBERTa-v2) plus the real all-MiniLM-L6-v2 folder.
* The hub source's pins: only the download transport (``huggingface_hub``'s
  ``snapshot_download`` / ``hf_hub_download`` / ``HfApi.repo_info`` and ``datasets``'
  ``load_dataset``) is replaced by one serving a local "upstream" folder; the asset
  registry under test is the real one.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from grabrag.core.errors import AssetError, ConfigError
from grabrag.data import asset_hub, assets
from grabrag.data.asset_hub import lock_path
from grabrag.data.assets import MANIFEST, materialise
from grabrag.pipeline.config import validate_config

from .local_hub import LocalHub, env_without_hub_settings

REPO = Path(__file__).resolve().parents[1]
SHIPPED = [REPO / "config" / "paper.yaml", REPO / "config" / "extended.yaml"]
# Hub repositories for which no published commit was found: pinned by their lock file at
# the first fetch (README, "Running the paper on a GPU machine or a cluster").
# Hub datasets with no published commit to pin: their first fetch records the commit of
# `main` in the lock, and later fetches reuse it.
PINNED_AT_FIRST_FETCH = {"florin-hf/nq_open_gold", "truthfulqa/truthful_qa"}
COMMIT = re.compile(r"^[0-9a-f]{40}$")

# --------------------------------------------------------------------------- shipped configs


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_configs_pin_every_hub_asset(path: Path) -> None:
    raw = yaml.safe_load(path.read_text())
    hub = {name: spec for name, spec in raw["assets"].items() if "hub" in spec}
    assert hub
    for name, spec in hub.items():
        assert "revision" in spec, f"{path.name}: hub asset {name} names no revision"
        if spec["hub"] not in PINNED_AT_FIRST_FETCH:
            assert COMMIT.match(spec["revision"]), f"{name}: {spec['revision']} is no commit"
    # GLiNER's backbone tokenizer is a declared asset: a few files, never the weights
    checked = validate_config(raw)
    tokenizer = checked["ner"]["tokenizer"]
    assert checked["ner"]["backend"] == "gliner" and tokenizer in hub
    assert hub[tokenizer]["hub"] == "microsoft/deberta-v3-base"
    assert set(hub[tokenizer]["files"]) >= {"config.json", "tokenizer_config.json"}
    assert not [f for f in hub[tokenizer]["files"] if f.endswith((".bin", ".h5", ".ot"))]


def _config(assets_: dict, **sections) -> dict:
    base = yaml.safe_load((REPO / "config.yaml").read_text())
    base["assets"].update(assets_)
    base.update(sections)
    return base


def test_a_hub_asset_without_revision_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"'assets\.bge\.revision'.*'BAAI/bge-small-en-v1\.5'"):
        validate_config(_config({"bge": {"hub": "BAAI/bge-small-en-v1.5"}}))
    ok = validate_config(_config({"bge": {"hub": "BAAI/bge-small-en-v1.5", "revision": "a" * 40}}))
    assert ok["assets"]["bge"]["revision"] == "a" * 40
    with pytest.raises(ConfigError, match=r"'assets\.bge\.files'.*'filename'"):
        validate_config(
            _config(
                {
                    "bge": {
                        "hub": "BAAI/bge-small-en-v1.5",
                        "revision": "a" * 40,
                        "filename": "config.json",
                        "files": ["config.json"],
                    }
                }
            )
        )


def test_ner_tokenizer_must_be_a_declared_asset_of_the_gliner_backend() -> None:
    gliner = {"gl": {"path": "/nowhere"}}
    with pytest.raises(ConfigError, match=r"'ner\.tokenizer' names asset 'tok'"):
        validate_config(
            _config(gliner, ner={"backend": "gliner", "asset": "gl", "tokenizer": "tok"})
        )
    with pytest.raises(ConfigError, match=r"'ner\.tokenizer' applies to the gliner backend"):
        validate_config(
            _config(gliner, ner={"backend": "spacy", "asset": "en-core-web-sm", "tokenizer": "gl"})
        )


# --------------------------------------------------------------------------- pinned hub assets


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalHub:
    import datasets
    import huggingface_hub

    local = LocalHub(tmp_path / "upstream")
    model = local.root / "org" / "model"
    (model / "tok").mkdir(parents=True)
    (model / "config.json").write_text('{"hidden": 4}\n')
    (model / "tok" / "vocab.txt").write_text("[PAD]\nhello\n")
    (model / "weights.bin").write_bytes(b"\x00weights")
    local.rows = [{"question": "who?", "answers": ["Ada"]}]
    monkeypatch.setattr(huggingface_hub, "snapshot_download", local.snapshot_download)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", local.hf_hub_download)
    monkeypatch.setattr(
        huggingface_hub, "HfApi", lambda: SimpleNamespace(repo_info=local.repo_info)
    )
    monkeypatch.setattr(datasets, "load_dataset", local.load_dataset)
    return local


SPECS = {
    "snapshot": ({"hub": "org/model", "revision": "main"}, "weights.bin"),
    "files": (
        {"hub": "org/model", "revision": "main", "files": ["config.json", "tok/vocab.txt"]},
        "tok/vocab.txt",
    ),
    "file": ({"hub": "org/model", "revision": "main", "filename": "weights.bin"}, "weights.bin"),
    "dataset": (
        {"hub": "org/data", "revision": "main", "repo_type": "dataset", "split": "test"},
        "test.jsonl",
    ),
}


def _change_upstream(hub: LocalHub, changed: str) -> None:
    if changed == "test.jsonl":
        hub.rows = [{"question": "who?", "answers": ["Grace"]}]
    else:
        path = hub.root / "org" / "model" / changed
        path.write_bytes(path.read_bytes() + b"changed")


@pytest.mark.parametrize("kind", SPECS)
def test_first_fetch_pins_and_a_changed_upstream_file_is_an_error(
    hub: LocalHub, tmp_path: Path, kind: str
) -> None:
    spec, changed = SPECS[kind]
    locks = tmp_path / "asset-locks"
    manifest = tmp_path / "res" / "a" / MANIFEST

    target = materialise("a", spec, manifest, locks)
    recorded = json.loads(manifest.read_text())
    assert recorded["revision"] == "main" and recorded["commit"] == hub.head
    assert hub.asked[-1] == hub.head  # the download is of the resolved commit
    assert (
        set(recorded["files"]) == set(asset_hub.file_hashes(target))
        and changed in recorded["files"]
    )
    assert not any(".cache" in f for f in recorded["files"])
    if kind == "files":
        assert set(recorded["files"]) == {"config.json", "tok/vocab.txt"}
    lock = json.loads(lock_path(locks, "a").read_text())
    assert lock["commit"] == hub.head and lock["files"] == recorded["files"]

    # "main" moves on upstream: a later fetch still downloads the locked commit
    pinned, hub.head = hub.head, "2" * 40
    hub.asked.clear()
    assert materialise("a", spec, manifest, locks) == target
    assert hub.asked == [pinned]

    before = recorded["files"][changed]
    _change_upstream(hub, changed)
    with pytest.raises(AssetError) as error:
        materialise("a", spec, manifest, locks)
    message = str(error.value)
    assert "'a'" in message and changed in message and before in message
    after = re.search(rf"{re.escape(changed)}: locked sha256 \w+, downloaded (\w+)", message)
    assert after and after.group(1) != before
    assert str(lock_path(locks, "a")) in message
    assert not manifest.exists()  # nothing that looks finished


def test_a_config_that_no_longer_matches_its_lock_is_an_error(
    hub: LocalHub, tmp_path: Path
) -> None:
    locks = tmp_path / "asset-locks"
    manifest = tmp_path / "res" / "a" / MANIFEST
    materialise("a", {"hub": "org/model", "revision": "main"}, manifest, locks)
    with pytest.raises(AssetError, match=r"'a'.*delete .*a\.json"):
        materialise("a", {"hub": "org/model", "revision": "3" * 40}, manifest, locks)


def test_a_configured_file_the_commit_lacks_is_an_error(hub: LocalHub, tmp_path: Path) -> None:
    spec = {"hub": "org/model", "revision": "4" * 40, "files": ["config.json", "spm.model"]}
    with pytest.raises(AssetError, match=r"'a'.*spm\.model.*assets\.a\.files"):
        materialise("a", spec, tmp_path / "res" / "a" / MANIFEST)
    assert hub.asked == ["4" * 40]  # a commit is used as given, never resolved


# --------------------------------------------------------------------------- disk and resume


def test_a_fetch_without_room_fails_before_downloading(hub: LocalHub, tmp_path: Path) -> None:
    # the config declares the asset's size (the hub's metadata is not reachable here):
    # a petabyte fits no test machine's disk
    spec = {"hub": "org/model", "revision": "5" * 40, "size_bytes": 10**15}
    manifest = tmp_path / "res" / "a" / MANIFEST
    with pytest.raises(AssetError) as error:
        materialise("a", spec, manifest)
    message = str(error.value)
    assert "'a'" in message and "needs about 1000.0 TB" in message and "are free" in message
    assert hub.asked == []  # nothing was downloaded
    assert not manifest.exists() and not (tmp_path / "res" / "a" / "files").exists()
    assert list((tmp_path / "res" / "a").iterdir()) == []  # no partial: nothing to resume
    # with room, the same asset is fetched
    assert materialise("a", {**spec, "size_bytes": 100}, manifest).is_dir()


def test_an_interrupted_hub_download_resumes_where_it_stopped(
    hub: LocalHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub

    spec = {"hub": "org/model", "revision": "6" * 40}
    home = tmp_path / "res" / "a"
    fetched = hub.snapshot_download
    folders: list[Path] = []

    def dies_halfway(repo_id, *, revision, local_dir, **kwargs):
        folders.append(Path(local_dir))
        (Path(local_dir) / "weights.bin.incomplete").parent.mkdir(parents=True, exist_ok=True)
        (Path(local_dir) / "weights.bin.incomplete").write_bytes(b"\x00wei")
        raise ConnectionError("the connection dropped")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", dies_halfway)
    with pytest.raises(AssetError, match="connection dropped"):
        materialise("a", spec, home / MANIFEST)
    # the partial download stays where the next run's hub client looks for it
    partial = home / assets.PARTIAL
    assert (partial / "files" / "model" / "weights.bin.incomplete").is_file()

    def resumes(repo_id, *, revision, local_dir, **kwargs):
        folders.append(Path(local_dir))
        assert (Path(local_dir) / "weights.bin.incomplete").is_file()
        (Path(local_dir) / "weights.bin.incomplete").unlink()
        return fetched(repo_id, revision=revision, local_dir=local_dir, **kwargs)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", resumes)
    (home / ".fetch-x1y2z3").mkdir()  # a killed non-hub fetch's leftovers
    target = materialise("a", spec, home / MANIFEST)
    assert folders[0] == folders[1] and (target / "weights.bin").is_file()
    assert not partial.exists() and not (home / ".fetch-x1y2z3").exists()
    # a partial download made for another spec is not resumed: it starts over
    partial.mkdir()
    (partial / "spec.json").write_text("{}")
    (partial / "files" / "model").mkdir(parents=True)
    (partial / "files" / "model" / "other.bin").write_bytes(b"x")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fetched)
    target = materialise("a", spec, home / MANIFEST)
    assert not (target / "other.bin").exists() and not partial.exists()


# --------------------------------------------------------------------------- offline loading

OFFLINE_SCRIPT = r"""
import json, socket, sys
attempts = []
def refuse(self, address, *args, **kwargs):
    attempts.append(repr(address))
    raise OSError(f"network disabled in this test: {address!r}")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = lambda address, *a, **k: refuse(None, address)

from grabrag.data.assets import resolve
from grabrag.core.errors import AssetError
from grabrag.contexts.ner import load_configured_ner
from grabrag.policies.nli import build_verifier
from grabrag.data.retrieval import embed, load_encoder
from grabrag.contexts.paired import load_token_counter

m = json.loads(sys.argv[1])
out = {}
ner_settings = {"backend": "gliner", "asset": "gliner-tiny", "threshold": 0.0}
ner = load_configured_ner(
    dict(ner_settings, tokenizer="backbone-tok"), resolve(m["gliner"]), resolve(m["backbone"])
)
out["gliner_spans"] = len(ner.predict(["Barack Obama visited Paris in France."])[0])
for case, tokenizer in (("no_tokenizer", None), ("tokenizer_without_config", m["bare_tok"])):
    try:
        load_configured_ner(
            dict(ner_settings, tokenizer="bare-tok" if tokenizer else None),
            resolve(m["gliner"]),
            resolve(tokenizer) if tokenizer else None,
        )
        out[case] = None
    except AssetError as error:
        out[case] = str(error)
from gliner import GLiNER
try:  # what the workflow guards against: GLiNER on its own reaches for the backbone
    GLiNER.from_pretrained(str(resolve(m["gliner"])))
    out["gliner_unguarded"] = None
except Exception as error:
    out["gliner_unguarded"] = type(error).__name__
verifier = build_verifier("transformers", resolve(m["nli"]), name="nli-tiny")
out["nli_labels"] = verifier.classify([("Paris is in France.", "Paris is in Spain.")])
encoder = load_encoder(resolve(m["encoder"]))
out["encoder_shape"] = list(embed(encoder, ["a passage", "another one"]).shape)
out["tokens"] = load_token_counter(str(resolve(m["encoder"]))).count("a short passage")
out["attempts"] = attempts
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def offline_assets(tmp_path_factory: pytest.TempPathFactory, encoder_dir: Path) -> dict:
    """Asset manifests (path assets) of a tiny GLiNER whose folder has no tokenizer and no
    encoder config (as urchade/gliner_medium-v2.1), its backbone tokenizer folder, the same
    folder without config.json, a tiny DeBERTa-v2 NLI model and the MiniLM encoder."""
    from .test_nli import MNLI_ORDER, _save_classifier, _tokenizer
    from .tiny_gliner import as_published, build_tiny_gliner

    root = tmp_path_factory.mktemp("offline")
    model_dir, backbone = build_tiny_gliner(root, encoder_dir)
    as_published(model_dir)
    bare = root / "bare-tok"
    shutil.copytree(backbone, bare)
    (bare / "config.json").unlink()
    nli = _save_classifier(root / "nli", _tokenizer(), MNLI_ORDER)

    manifests = {}
    for name, path in {
        "gliner": model_dir,
        "backbone": backbone,
        "bare_tok": bare,
        "nli": nli,
        "encoder": encoder_dir,
    }.items():
        manifest = root / "res" / name / MANIFEST
        materialise(name, {"path": str(path)}, manifest)
        manifests[name] = str(manifest)
    return manifests


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def offline_run(offline_assets: dict, tmp_path_factory: pytest.TempPathFactory) -> dict:
    import os

    home = tmp_path_factory.mktemp("hf-home")
    env = env_without_hub_settings()
    env.update(
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HOME=str(home),
        XDG_CACHE_HOME=str(home / "xdg"),
        HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}",
        PYTHONPATH=os.pathsep.join([str(REPO / "workflow"), env.get("PYTHONPATH", "")]),
    )
    proc = subprocess.run(
        [sys.executable, "-c", OFFLINE_SCRIPT, json.dumps(offline_assets)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_backend_loads_from_asset_folders_with_the_hub_unreachable(offline_run) -> None:
    assert offline_run["attempts"] == []  # not one connection was even tried
    assert offline_run["gliner_spans"] > 0  # threshold 0: the random model tags something
    assert offline_run["nli_labels"][0] in {"entailment", "neutral", "contradiction"}
    assert offline_run["encoder_shape"] == [2, 384]
    assert offline_run["tokens"] > 0


def test_the_test_gliner_reaches_for_its_backbone_without_the_guard(offline_run) -> None:
    """The tiny GLiNER reproduces the published model's gap: on its own, GLiNER fails
    offline for want of the backbone microsoft/deberta-v3-base."""
    assert offline_run["gliner_unguarded"] is not None


def test_gliner_without_its_backbone_tokenizer_names_the_asset_and_the_fix(offline_run) -> None:
    message = offline_run["no_tokenizer"]
    assert message is not None
    assert "'gliner-tiny'" in message and "microsoft/deberta-v3-base" in message
    assert "ner.tokenizer" in message and "tokenizer" in message
    message = offline_run["tokenizer_without_config"]
    assert message is not None
    assert "'bare-tok'" in message and "config.json" in message and "'gliner-tiny'" in message


def test_an_offline_hub_fetch_leaves_no_partial_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real hub client, offline, writes its bookkeeping (CACHEDIR.TAG, a lock) and
    fails: nothing was downloaded, so nothing is kept to resume."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    home = tmp_path / "res" / "a"
    spec = {"hub": "org/absent", "revision": "7" * 40, "filename": "a.gguf"}
    with pytest.raises(AssetError, match="could not fetch 'org/absent'"):
        materialise("a", spec, home / MANIFEST)
    assert not (home / assets.PARTIAL).exists()
    assert [p.name for p in home.iterdir()] == []
