"""Tests for the asset registry (grabrag.data.assets).

The ``pypi`` source really runs ``pip download --no-deps`` in a subprocess, but against
tiny wheel and sdist containers built here in a temporary folder: ``PIP_NO_INDEX=1`` and
``PIP_FIND_LINKS=<folder>`` (inherited by the subprocess) keep pip offline, and
``PIP_CONFIG_FILE=/dev/null`` stops a global pip.conf from adding other links or indexes.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from grabrag.core.errors import AssetError
from grabrag.data import asset_checks, assets
from grabrag.data.assets import MANIFEST, manifest_path, materialise, resolve

# --------------------------------------------------------------------------- containers

WHEEL_NAME = "grabrag_fixture_pkg-0.1.0-py3-none-any.whl"
WHEEL_REQ = "grabrag-fixture-pkg==0.1.0"
SDIST_ROOT = "grabrag-fixture-sdist-0.1.0"
SDIST_NAME = f"{SDIST_ROOT}.tar.gz"
SDIST_REQ = "grabrag-fixture-sdist==0.1.0"

WHEEL_FILES: dict[str, bytes] = {
    "grabrag_fixture_pkg/__init__.py": b"",
    "grabrag_fixture_pkg/data/weights.bin": b"\x00\x01\x02fixture-weights\xff",
    "grabrag_fixture_pkg/model/config.json": b'{"hidden": 4}\n',
    "grabrag_fixture_pkg/model/tokenizer/vocab.txt": b"[PAD]\n[UNK]\nhello\n",
    "grabrag_fixture_pkg/model/tokenizer/deep/merges.txt": b"h e\nhe llo\n",
    # a sibling whose name starts like the folder member: must not be picked up
    "grabrag_fixture_pkg/model_extra.txt": b"not part of model/\n",
}

FIXTURE_BACKEND = b'''"""In-tree build backend: enough for pip to prepare metadata, never builds."""
import os


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    name = "grabrag_fixture_sdist-0.1.0.dist-info"
    os.makedirs(os.path.join(metadata_directory, name))
    with open(os.path.join(metadata_directory, name, "METADATA"), "w") as handle:
        handle.write("Metadata-Version: 2.1\\nName: grabrag-fixture-sdist\\nVersion: 0.1.0\\n")
    return name


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("fixture sdist is a file container; it is never built")
'''

SDIST_FILES: dict[str, bytes] = {
    f"{SDIST_ROOT}/PKG-INFO": (
        b"Metadata-Version: 2.1\nName: grabrag-fixture-sdist\nVersion: 0.1.0\n"
    ),
    f"{SDIST_ROOT}/pyproject.toml": (
        b"[build-system]\n"
        b"requires = []\n"
        b'build-backend = "fixture_backend"\n'
        b'backend-path = ["."]\n\n'
        b"[project]\n"
        b'name = "grabrag-fixture-sdist"\n'
        b'version = "0.1.0"\n'
    ),
    f"{SDIST_ROOT}/fixture_backend.py": FIXTURE_BACKEND,
    f"{SDIST_ROOT}/support/dev-v1.1.json": b'{"version": "1.1", "data": []}\n',
    f"{SDIST_ROOT}/support/tasks/task.json": b'{"name": "conflicts"}\n',
    f"{SDIST_ROOT}/support/tasks/more/notes.md": b"# notes\n",
}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def _build_wheel(path: Path) -> None:
    dist_info = "grabrag_fixture_pkg-0.1.0.dist-info"
    files = dict(WHEEL_FILES)
    files[f"{dist_info}/METADATA"] = (
        b"Metadata-Version: 2.1\nName: grabrag-fixture-pkg\nVersion: 0.1.0\n"
    )
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: grabrag-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = [f"{name},{_record_hash(data)},{len(data)}" for name, data in files.items()]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    with zipfile.ZipFile(path, "w") as archive:
        # an explicit directory entry, as some wheels have: must be skipped, not extracted
        archive.writestr("grabrag_fixture_pkg/model/", b"")
        for name, data in files.items():
            archive.writestr(name, data)


def _build_sdist(path: Path) -> None:
    with tarfile.open(path, "w:gz") as archive:
        for name, data in SDIST_FILES.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="session")
def containers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A find-links folder holding the tiny wheel and sdist; returns their sha256s."""
    links = tmp_path_factory.mktemp("find-links")
    _build_wheel(links / WHEEL_NAME)
    _build_sdist(links / SDIST_NAME)
    return {
        "links": str(links),
        "wheel_sha": asset_checks.sha256_file(links / WHEEL_NAME),
        "sdist_sha": asset_checks.sha256_file(links / SDIST_NAME),
    }


@pytest.fixture
def offline_pip(
    containers: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", containers["links"])
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_CACHE_DIR", str(tmp_path / "pip-cache"))
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.setenv("GRABRAG_CACHE", str(tmp_path / "grabrag-cache"))
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_REQUIRE_VIRTUALENV"):
        monkeypatch.delenv(var, raising=False)
    return containers


# --------------------------------------------------------------------------- helpers


def _wheel_spec(containers: dict[str, str], member: str, **extra: str) -> dict[str, str]:
    return {
        "pypi": WHEEL_REQ,
        "member": member,
        "container_sha256": containers["wheel_sha"],
        **extra,
    }


def _sdist_spec(containers: dict[str, str], member: str, **extra: str) -> dict[str, str]:
    return {
        "pypi": SDIST_REQ,
        "member": member,
        "container_sha256": containers["sdist_sha"],
        **extra,
    }


def _all_files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _assert_nothing_left(home: Path) -> None:
    """After a failure: no manifest, no files/ folder, no .fetch-* temp folder."""
    assert not (home / MANIFEST).exists()
    assert not (home / "files").exists()
    leftovers = sorted(p.name for p in home.iterdir()) if home.exists() else []
    assert leftovers == [], f"left behind under {home}: {leftovers}"


def _assert_no_container(home: Path) -> None:
    containers_left = [p for p in home.rglob("*") if p.name.endswith((".whl", ".tar.gz", ".zip"))]
    assert containers_left == []


# --------------------------------------------------------------------------- pypi source


def test_pypi_file_member_from_wheel(
    offline_pip: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resources = tmp_path / "resources"
    manifest = Path(manifest_path(str(resources), "weights"))
    home = manifest.parent
    member = "grabrag_fixture_pkg/data/weights.bin"
    expected = WHEEL_FILES[member]

    # Spy on the manifest writer (calling through): when it runs, the member must
    # already be in its final place and the temporary work folder gone.
    seen: dict[str, object] = {}
    real_write_json = assets.write_json

    def spy(path: Path, obj: object) -> None:
        seen["path"] = Path(path)
        seen["target_in_place"] = (home / "files" / "weights.bin").is_file()
        seen["entries"] = sorted(p.name for p in home.iterdir())
        real_write_json(path, obj)

    monkeypatch.setattr(assets, "write_json", spy)

    target = materialise(
        "weights", _wheel_spec(offline_pip, member, sha256=_sha(expected)), manifest
    )

    assert seen["path"] == manifest
    assert seen["target_in_place"] is True
    assert seen["entries"] == ["files"]  # no manifest yet, no .fetch-* left
    assert sorted(p.name for p in home.iterdir()) == ["files", MANIFEST]

    assert target == home / "files" / "weights.bin"
    resolved = resolve(manifest)
    assert resolved == target
    assert resolved.read_bytes() == expected
    assert _all_files(home / "files") == {"weights.bin": expected}

    data = json.loads(manifest.read_text(encoding="utf-8"))
    assert data["name"] == "weights"
    assert data["source"] == "pypi"
    assert data["requirement"] == WHEEL_REQ
    assert data["member"] == member
    assert data["container"] == WHEEL_NAME
    assert data["container_sha256"] == offline_pip["wheel_sha"]
    assert data["sha256"] == _sha(expected)
    assert data["path"] == "files/weights.bin"  # relative: the resources folder can move
    _assert_no_container(home)


def test_pypi_container_is_downloaded_once_per_machine(
    offline_pip: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    member = "grabrag_fixture_pkg/data/weights.bin"
    spec = _wheel_spec(offline_pip, member)
    caplog.set_level("INFO", logger="grabrag")
    materialise("weights", spec, manifest_path(str(tmp_path / "checkout1"), "weights"))
    assert "downloaded grabrag_fixture_pkg" in caplog.text and "MB/s" in caplog.text
    cached = tmp_path / "grabrag-cache" / "pypi" / offline_pip["wheel_sha"] / WHEEL_NAME
    assert asset_checks.sha256_file(cached) == offline_pip["wheel_sha"]
    # A second checkout: no index at all, the container comes from the cache.
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    caplog.clear()
    second = materialise("weights", spec, manifest_path(str(tmp_path / "checkout2"), "weights"))
    assert second.read_bytes() == WHEEL_FILES[member]
    assert "from the download cache" in caplog.text
    # A corrupt cached container is not trusted: it is downloaded again (and fails here,
    # with no index, naming the package).
    cached.write_bytes(b"corrupt")
    with pytest.raises(AssetError, match="pip download --no-deps"):
        materialise("weights", spec, manifest_path(str(tmp_path / "checkout3"), "weights"))


def test_pypi_file_member_without_expected_sha_still_records_it(
    offline_pip: dict[str, str], tmp_path: Path
) -> None:
    manifest = tmp_path / "res" / "cfg" / MANIFEST
    member = "grabrag_fixture_pkg/model/config.json"
    materialise("cfg", _wheel_spec(offline_pip, member), manifest)
    data = json.loads(manifest.read_text(encoding="utf-8"))
    assert data["sha256"] == _sha(WHEEL_FILES[member])
    assert resolve(manifest).read_bytes() == WHEEL_FILES[member]


def test_pypi_folder_member_from_wheel(offline_pip: dict[str, str], tmp_path: Path) -> None:
    manifest = tmp_path / "res" / "encoder" / MANIFEST
    home = manifest.parent
    target = materialise(
        "encoder", _wheel_spec(offline_pip, "grabrag_fixture_pkg/model/"), manifest
    )

    assert target == home / "files" / "model"
    assert resolve(manifest) == target
    assert target.is_dir()
    assert _all_files(target) == {
        "config.json": WHEEL_FILES["grabrag_fixture_pkg/model/config.json"],
        "tokenizer/vocab.txt": WHEEL_FILES["grabrag_fixture_pkg/model/tokenizer/vocab.txt"],
        "tokenizer/deep/merges.txt": WHEEL_FILES[
            "grabrag_fixture_pkg/model/tokenizer/deep/merges.txt"
        ],
    }
    # only the folder was extracted: no sibling files, nothing else of the package
    assert sorted(p.name for p in (home / "files").iterdir()) == ["model"]
    data = json.loads(manifest.read_text(encoding="utf-8"))
    assert data["path"] == "files/model"
    assert "sha256" not in data
    _assert_no_container(home)


def test_pypi_relative_resources_dir(
    offline_pip: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Snakemake passes manifests relative to the working directory (resources/<name>/)."""
    monkeypatch.chdir(tmp_path)
    manifest = manifest_path("resources", "encoder")
    assert not Path(manifest).is_absolute()
    materialise("encoder", _wheel_spec(offline_pip, "grabrag_fixture_pkg/model/"), manifest)

    resolved = resolve(manifest)
    assert resolved.resolve() == (tmp_path / "resources" / "encoder" / "files" / "model").resolve()
    assert (resolved / "tokenizer" / "deep" / "merges.txt").read_bytes() == WHEEL_FILES[
        "grabrag_fixture_pkg/model/tokenizer/deep/merges.txt"
    ]
    data = json.loads(Path(manifest).read_text(encoding="utf-8"))
    assert data["path"] == "files/model"


def test_pypi_folder_member_rejects_sha256(offline_pip: dict[str, str], tmp_path: Path) -> None:
    manifest = tmp_path / "res" / "encoder" / MANIFEST
    spec = _wheel_spec(offline_pip, "grabrag_fixture_pkg/model/", sha256="0" * 64)
    with pytest.raises(AssetError, match="'encoder'.*applies to files"):
        materialise("encoder", spec, manifest)
    _assert_nothing_left(manifest.parent)


@pytest.mark.parametrize(
    ("member", "expected_files", "expected_target"),
    [
        (
            f"{SDIST_ROOT}/support/dev-v1.1.json",
            {"dev-v1.1.json": SDIST_FILES[f"{SDIST_ROOT}/support/dev-v1.1.json"]},
            "dev-v1.1.json",
        ),
        (
            f"{SDIST_ROOT}/support/tasks/",
            {
                "tasks/task.json": SDIST_FILES[f"{SDIST_ROOT}/support/tasks/task.json"],
                "tasks/more/notes.md": SDIST_FILES[f"{SDIST_ROOT}/support/tasks/more/notes.md"],
            },
            "tasks",
        ),
    ],
    ids=["file", "folder"],
)
def test_pypi_sdist_member(
    offline_pip: dict[str, str],
    tmp_path: Path,
    member: str,
    expected_files: dict[str, bytes],
    expected_target: str,
) -> None:
    manifest = tmp_path / "res" / "squad" / MANIFEST
    home = manifest.parent
    target = materialise("squad", _sdist_spec(offline_pip, member), manifest)

    assert target == home / "files" / expected_target
    assert resolve(manifest) == target
    assert _all_files(home / "files") == expected_files
    data = json.loads(manifest.read_text(encoding="utf-8"))
    assert data["container"] == SDIST_NAME
    assert data["container_sha256"] == offline_pip["sdist_sha"]
    if target.is_file():
        assert data["sha256"] == _sha(expected_files[expected_target])
    _assert_no_container(home)


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_pypi_container_sha_mismatch(
    offline_pip: dict[str, str], tmp_path: Path, kind: str
) -> None:
    manifest = tmp_path / "res" / "llm" / MANIFEST
    if kind == "wheel":
        spec = _wheel_spec(offline_pip, "grabrag_fixture_pkg/data/weights.bin")
        container, actual = WHEEL_NAME, offline_pip["wheel_sha"]
    else:
        spec = _sdist_spec(offline_pip, f"{SDIST_ROOT}/support/dev-v1.1.json")
        container, actual = SDIST_NAME, offline_pip["sdist_sha"]
    spec["container_sha256"] = "ab" * 32

    with pytest.raises(AssetError) as excinfo:
        materialise("llm", spec, manifest)

    message = str(excinfo.value)
    assert "'llm'" in message
    assert "sha256 mismatch" in message
    assert container in message
    assert "ab" * 32 in message and actual in message
    _assert_nothing_left(manifest.parent)


def test_pypi_member_sha_mismatch(offline_pip: dict[str, str], tmp_path: Path) -> None:
    manifest = tmp_path / "res" / "llm" / MANIFEST
    member = "grabrag_fixture_pkg/data/weights.bin"
    spec = _wheel_spec(offline_pip, member, sha256="cd" * 32)

    with pytest.raises(AssetError) as excinfo:
        materialise("llm", spec, manifest)

    message = str(excinfo.value)
    assert "'llm'" in message
    assert "sha256 mismatch" in message
    assert "weights.bin" in message
    assert _sha(WHEEL_FILES[member]) in message
    _assert_nothing_left(manifest.parent)


def test_failed_refetch_removes_the_old_manifest(
    offline_pip: dict[str, str], tmp_path: Path
) -> None:
    manifest = tmp_path / "res" / "llm" / MANIFEST
    member = "grabrag_fixture_pkg/data/weights.bin"
    materialise("llm", _wheel_spec(offline_pip, member), manifest)
    assert manifest.exists()

    with pytest.raises(AssetError, match="sha256 mismatch"):
        materialise("llm", _wheel_spec(offline_pip, member, sha256="cd" * 32), manifest)
    assert not manifest.exists()
    assert not any(p.name.startswith(".fetch-") for p in manifest.parent.iterdir())


@pytest.mark.parametrize(
    ("kind", "member"),
    [
        ("wheel", "grabrag_fixture_pkg/data/missing.bin"),
        ("wheel", "grabrag_fixture_pkg/nothing-here/"),
        # a file named like a folder member (no trailing '/') is not a file member
        ("wheel", "grabrag_fixture_pkg/model"),
        ("sdist", f"{SDIST_ROOT}/support/missing.json"),
        ("sdist", f"{SDIST_ROOT}/nothing-here/"),
    ],
)
def test_pypi_missing_member(
    offline_pip: dict[str, str], tmp_path: Path, kind: str, member: str
) -> None:
    manifest = tmp_path / "res" / "data" / MANIFEST
    make = _wheel_spec if kind == "wheel" else _sdist_spec
    with pytest.raises(AssetError) as excinfo:
        materialise("data", make(offline_pip, member), manifest)
    message = str(excinfo.value)
    assert "'data'" in message
    assert f"member '{member}' not found" in message
    _assert_nothing_left(manifest.parent)


@pytest.mark.parametrize(
    "requirement", ["grabrag-fixture-absent==0.1.0", "grabrag-fixture-pkg==9.9.9"]
)
def test_pypi_package_not_found(
    offline_pip: dict[str, str], tmp_path: Path, requirement: str
) -> None:
    manifest = tmp_path / "res" / "ghost" / MANIFEST
    spec = {
        "pypi": requirement,
        "member": "ghost/data.bin",
        "container_sha256": "00" * 32,
    }
    with pytest.raises(AssetError) as excinfo:
        materialise("ghost", spec, manifest)
    message = str(excinfo.value)
    assert "'ghost'" in message
    assert requirement in message
    assert "pip download" in message
    _assert_nothing_left(manifest.parent)


@pytest.fixture
def json_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A package index on loopback that answers PEP 691 JSON listings from files under the
    returned folder (<project>/index.html), set as $PIP_INDEX_URL."""
    import functools
    import http.server
    import threading

    root = tmp_path / "simple"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.delenv("PIP_NO_INDEX", raising=False)
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_address[1]}/simple")
    monkeypatch.setenv("GRABRAG_CACHE", str(tmp_path / "cache"))
    try:
        yield root
    finally:
        server.shutdown()
        server.server_close()


def _listing(root: Path, project: str, versions: list[str]) -> None:
    files = [
        {"filename": f"{project}-{v}.tar.gz", "hashes": {"sha256": "ab" * 32}, "url": "x"}
        for v in versions
    ]
    (root / project).mkdir()
    (root / project / "index.html").write_text(json.dumps({"files": files, "versions": versions}))


def test_a_release_the_index_no_longer_lists_says_to_declare_a_copy(
    json_index: Path, tmp_path: Path
) -> None:
    """bigbench 1.0.0 vanished from PyPI, leaving 0.0.1: the error says so and what to do,
    where a checksum that matches no file of a listed release says to check the pin."""
    _listing(json_index, "bigbench", ["0.0.1"])
    spec = {"pypi": "bigbench==1.0.0", "member": "a/b.json", "container_sha256": "00" * 32}
    manifest = tmp_path / "res" / "gone" / MANIFEST
    with pytest.raises(AssetError) as excinfo:
        materialise("gone", spec, manifest)
    message = str(excinfo.value)
    assert "asset 'gone'" in message and "no release 1.0.0 of it (only 0.0.1)" in message
    assert "declare the asset with 'path' and 'sha256'" in message
    _assert_nothing_left(manifest.parent)
    with pytest.raises(AssetError, match="check the asset's 'pypi' requirement and checksum"):
        materialise("gone", {**spec, "pypi": "bigbench==0.0.1"}, manifest)


# --------------------------------------------------------------------------- path source


def test_path_file(tmp_path: Path) -> None:
    local = tmp_path / "local" / "model.gguf"
    local.parent.mkdir()
    local.write_bytes(b"GGUF fixture bytes")
    manifest = tmp_path / "res" / "llm" / MANIFEST

    target = materialise("llm", {"path": str(local), "sha256": _sha(local.read_bytes())}, manifest)

    assert target == local.resolve()
    assert resolve(manifest) == local.resolve()
    data = json.loads(manifest.read_text(encoding="utf-8"))
    assert data == {
        "source": "path",
        "sha256": _sha(b"GGUF fixture bytes"),
        "path": str(local.resolve()),
        "name": "llm",
    }
    # referenced in place: nothing copied beside the manifest
    assert sorted(p.name for p in manifest.parent.iterdir()) == [MANIFEST]


def test_path_file_sha_mismatch(tmp_path: Path) -> None:
    local = tmp_path / "local" / "model.gguf"
    local.parent.mkdir()
    local.write_bytes(b"GGUF fixture bytes")
    manifest = tmp_path / "res" / "llm" / MANIFEST

    with pytest.raises(AssetError) as excinfo:
        materialise("llm", {"path": str(local), "sha256": "ef" * 32}, manifest)
    message = str(excinfo.value)
    assert "'llm'" in message
    assert "sha256 mismatch" in message
    assert "model.gguf" in message
    _assert_nothing_left(manifest.parent)
    assert local.read_bytes() == b"GGUF fixture bytes"  # the user's file is untouched


def test_path_folder(tmp_path: Path) -> None:
    local = tmp_path / "local" / "encoder"
    (local / "sub").mkdir(parents=True)
    (local / "config.json").write_text("{}\n", encoding="utf-8")
    (local / "sub" / "vocab.txt").write_text("a\n", encoding="utf-8")
    manifest = tmp_path / "res" / "encoder" / MANIFEST

    target = materialise("encoder", {"path": str(local)}, manifest)

    assert target == local.resolve()
    assert resolve(manifest) == local.resolve()
    data = json.loads(manifest.read_text(encoding="utf-8"))
    assert data["source"] == "path"
    assert data["path"] == str(local.resolve())
    assert "sha256" not in data


def test_path_missing(tmp_path: Path) -> None:
    manifest = tmp_path / "res" / "llm" / MANIFEST
    with pytest.raises(AssetError) as excinfo:
        materialise("llm", {"path": str(tmp_path / "nowhere" / "model.gguf")}, manifest)
    message = str(excinfo.value)
    assert "'llm'" in message
    assert "assets.llm.path" in message
    assert "nowhere" in message
    _assert_nothing_left(manifest.parent)


def test_no_source(tmp_path: Path) -> None:
    manifest = tmp_path / "res" / "odd" / MANIFEST
    with pytest.raises(AssetError, match="'odd'.*no source"):
        materialise("odd", {"member": "x"}, manifest)
    _assert_nothing_left(manifest.parent)


# --------------------------------------------------------------------------- hub source

# The hub clients read HF_HUB_OFFLINE / HF_HOME once, at import; another test may already
# have imported them in this process, so the hub checks run in a fresh interpreter that
# inherits the patched environment.
HUB_SCRIPT = """
import json, sys
from grabrag.data.assets import materialise
from grabrag.core.errors import AssetError
name, spec, manifest = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
try:
    materialise(name, spec, manifest)
except AssetError as exc:
    print(json.dumps({"error": str(exc)}))
else:
    print(json.dumps({"error": None}))
"""


@pytest.mark.parametrize(
    ("name", "spec"),
    [
        ("bge-small", {"hub": "BAAI/bge-small-en-v1.5", "revision": "main"}),
        ("bge-pinned", {"hub": "BAAI/bge-small-en-v1.5", "revision": "0" * 40}),
        (
            "bge-config",
            {"hub": "BAAI/bge-small-en-v1.5", "revision": "main", "filename": "config.json"},
        ),
        (
            "squad-hub",
            {
                "hub": "rajpurkar/squad",
                "revision": "main",
                "repo_type": "dataset",
                "split": "validation",
            },
        ),
    ],
    ids=["model-snapshot", "model-snapshot-at-commit", "model-file", "dataset"],
)
def test_hub_unreachable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, spec: dict[str, str]
) -> None:
    hf_home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(hf_home))
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    manifest = tmp_path / "res" / name / MANIFEST

    proc = subprocess.run(
        [sys.executable, "-c", HUB_SCRIPT, name, json.dumps(spec), str(manifest)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    message = json.loads(proc.stdout.strip().splitlines()[-1])["error"]

    assert message is not None, "materialise succeeded although the hub is offline"
    assert f"'{name}'" in message
    assert "Hugging Face hub" in message
    assert spec["hub"] in message
    assert f"assets.{name}.path" in message
    _assert_nothing_left(manifest.parent)


def test_hub_dataset_without_split(tmp_path: Path) -> None:
    manifest = tmp_path / "res" / "squad-hub" / MANIFEST
    spec = {"hub": "rajpurkar/squad", "revision": "0" * 40, "repo_type": "dataset"}
    with pytest.raises(AssetError, match="'squad-hub'.*needs 'split'"):
        materialise("squad-hub", spec, manifest)
    _assert_nothing_left(manifest.parent)


# --------------------------------------------------------------------------- resolve


def test_resolve_pypi_target_deleted(offline_pip: dict[str, str], tmp_path: Path) -> None:
    manifest = tmp_path / "res" / "encoder" / MANIFEST
    target = materialise(
        "encoder", _wheel_spec(offline_pip, "grabrag_fixture_pkg/model/"), manifest
    )
    for path in sorted(target.rglob("*"), reverse=True):
        path.rmdir() if path.is_dir() else path.unlink()
    target.rmdir()

    with pytest.raises(AssetError) as excinfo:
        resolve(manifest)
    message = str(excinfo.value)
    assert "'encoder'" in message
    assert "is gone" in message
    assert f"delete {manifest}" in message


def test_resolve_path_target_deleted(tmp_path: Path) -> None:
    local = tmp_path / "model.gguf"
    local.write_bytes(b"x")
    manifest = tmp_path / "res" / "llm" / MANIFEST
    materialise("llm", {"path": str(local)}, manifest)
    local.unlink()

    with pytest.raises(AssetError, match=r"'llm'.*delete .*manifest\.json"):
        resolve(manifest)


def test_resolve_follows_a_moved_resources_folder(
    offline_pip: dict[str, str], tmp_path: Path
) -> None:
    manifest = tmp_path / "res" / "weights" / MANIFEST
    member = "grabrag_fixture_pkg/data/weights.bin"
    materialise("weights", _wheel_spec(offline_pip, member), manifest)
    moved = tmp_path / "elsewhere"
    (tmp_path / "res").rename(moved)
    assert resolve(moved / "weights" / MANIFEST).read_bytes() == WHEEL_FILES[member]


def test_hub_model_under_a_relative_symlinked_resources_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: the hub clients return fully resolved paths; resources_dir may be
    relative and go through a symlink. The hub cannot be reached here, so its download
    function is replaced by one that returns paths exactly as the real one does."""
    import huggingface_hub

    def snapshot_download(repo_id: str, *, revision: str, local_dir: Path, **kwargs) -> str:
        folder = Path(os.path.realpath(local_dir))
        folder.mkdir(parents=True)
        (folder / "config.json").write_text("{}")
        return str(folder)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    monkeypatch.chdir(tmp_path)
    manifest = manifest_path("link/resources", "encoder")
    target = materialise("encoder", {"hub": "org/encoder", "revision": "a" * 40}, manifest)
    assert (target / "config.json").read_text() == "{}"
    assert resolve(manifest) == Path(manifest).parent / "files" / "model"
    assert json.loads(Path(manifest).read_text())["path"] == "files/model"
