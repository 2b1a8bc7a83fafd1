"""Time llama-cpp-python's build from its sdist, as the README's install builds it, with and
without llama.cpp's unused `common` library (envs/llama-cpp-library-only.cmake).

    python benchmarks/bench_install.py [--sdist PATH] [--rounds N]

Each round builds the wheel twice, one build after the other (A: `-DLLAVA_BUILD=OFF` alone;
B: the README's CMAKE_ARGS, which add the project include), with pip's cache off, and prints
the wall time of each build, the ratio A/B, and the shared libraries each wheel holds
(both hold libllama and the ggml libraries; only A holds libllama-common). The sdist is
downloaded once (`pip download`) unless given, so the network is not timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VERSION = "0.3.36"
PROJECT_INCLUDE = REPO / "envs" / "llama-cpp-library-only.cmake"
VARIANTS = {
    "A (LLAVA_BUILD=OFF)": "-DLLAVA_BUILD=OFF",
    "B (README: common library off too)": (
        f"-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE={PROJECT_INCLUDE}"
    ),
}


def build(sdist: Path, cmake_args: str, out: Path) -> tuple[float, list[str]]:
    env = {**os.environ, "CMAKE_ARGS": cmake_args}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-cache-dir"]
        + ["-w", str(out), str(sdist)],
        env=env,
        check=True,
    )
    seconds = time.perf_counter() - start
    (wheel,) = out.glob("llama_cpp_python-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        libs = sorted({Path(n).name.split(".so")[0] for n in archive.namelist() if ".so" in n})
    return seconds, libs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sdist", type=Path)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sdist = args.sdist
        if sdist is None:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "-q", "--no-deps"]
                + ["--no-binary", ":all:", "-d", tmp, f"llama-cpp-python=={VERSION}"],
                check=True,
            )
            (sdist,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        times: dict[str, list[float]] = {name: [] for name in VARIANTS}
        for round_ in range(args.rounds):
            for name, cmake_args in VARIANTS.items():
                out = Path(tmp) / f"wheel-{round_}-{len(times[name])}-{name[0]}"
                seconds, libs = build(sdist, cmake_args, out)
                times[name].append(seconds)
                print(f"round {round_ + 1}, {name}: {seconds:.1f} s; libraries: {', '.join(libs)}")
        (a, b) = (statistics.median(t) for t in times.values())
        load = os.getloadavg()[0]
        print(
            f"median A {a:.1f} s, B {b:.1f} s: B {a / b:.2f}x faster (load {load:.2f} at the end)"
        )


if __name__ == "__main__":
    main()
