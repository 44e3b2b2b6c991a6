"""specsim.safe_read and the YAML loader's checks, in process: the counting behind each cap
(alias growth, inflated bytes, inflation ratio, line length, columns), duplicate keys and
columns, and the variables that raise a cap. The CLI cases are in test_input_bombs.py."""

from __future__ import annotations

import gzip

import pytest
import yaml

from specsim import safe_read, yamlio
from specsim.cost_models.errors import CatalogError
from specsim.errors import ScenarioError
from specsim.traces.errors import TraceError


def _growth(text: str) -> int:
    return yamlio.alias_growth(yaml.compose(text, Loader=yamlio.Loader))


def test_alias_growth_counts_what_aliases_add():
    assert _growth("a: [1, 2]\nb: {c: 3}") == 0
    assert _growth("a: &x [1, 2]\nb: *x") == 3  # the list and its two items again
    assert _growth("a: &x [1, 2]\nb: [*x, *x]") == 6
    assert _growth(f"a: &s {'y' * 5000}\nb: *s") == 5  # a scalar: one node per started KiB
    assert _growth("base: &b {x: 1}\nd: {<<: *b, y: 2}") == 3


def test_alias_budget_and_its_variable(monkeypatch):
    text = "a: &x [1, 2, 3]\nb: [*x, *x]"  # adds 8
    assert yamlio.load(text)["b"] == [[1, 2, 3]] * 2
    monkeypatch.setenv("SPECSIM_MAX_YAML_ALIAS_NODES", "7")
    with pytest.raises(safe_read.InputLimitError, match=r"^f\.yaml: YAML aliases expand it by "
                       r"8 nodes \(limit 7 nodes, set by SPECSIM_MAX_YAML_ALIAS_NODES; if it "
                       r"is meant, set SPECSIM_MAX_YAML_ALIAS_NODES higher\)$"):
        yamlio.load(text, "f.yaml")  # the cached parse does not skip the check
    monkeypatch.setenv("SPECSIM_MAX_YAML_ALIAS_NODES", "8")
    assert yamlio.load(text)["a"] == [1, 2, 3]


def test_limit_errors_are_every_packages_user_error():
    err = safe_read.too_much("x", "found", safe_read.COLUMNS)
    assert isinstance(err, ScenarioError | CatalogError | TraceError)
    assert all(isinstance(err, t) for t in (ScenarioError, CatalogError, TraceError))


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5", "inf"])
def test_a_bad_variable_is_one_line(monkeypatch, value):
    monkeypatch.setenv("SPECSIM_MAX_COLUMNS", value)
    with pytest.raises(safe_read.InputError, match="SPECSIM_MAX_COLUMNS: expected a positive "
                                                   "whole number of columns"):
        safe_read.limit(safe_read.COLUMNS)


def test_recursive_alias_is_refused():
    with pytest.raises(yaml.YAMLError, match="holds itself"):
        yamlio.load("a: &x [1, *x]")


@pytest.mark.parametrize("text, line, key", [
    ("a: 1\nb: 2\na: 3\n", 3, "'a'"),
    ("top:\n  x: 1\n  x: 1\n", 3, "'x'"),
    ("{1: a, 1.0: b}", 1, "1.0"),  # one key to Python: the second would replace the first
])
def test_duplicate_yaml_keys(text, line, key):
    with pytest.raises(safe_read.InputError) as info:
        yamlio.load_checked(text, "s.yaml")
    assert str(info.value).startswith(f"s.yaml line {line}: not valid YAML (duplicate key {key}")
    with pytest.raises(yaml.YAMLError):
        yamlio.load_bundled(text)


def test_merge_keys_may_be_overridden():
    data = yamlio.load("base: &b {x: 1, y: 1}\nd:\n  <<: *b\n  x: 2\n")
    assert data["d"] == {"x": 2, "y": 1}


def test_file_size_cap(tmp_path, monkeypatch):
    path = tmp_path / "s.yaml"
    path.write_text("a: 1\n")
    monkeypatch.setenv("SPECSIM_MAX_YAML_BYTES", "4")
    with pytest.raises(safe_read.InputLimitError, match=r"s\.yaml: 5 bytes, too large for a "
                       r"YAML scenario \(limit 4 bytes, set by SPECSIM_MAX_YAML_BYTES"):
        yamlio.load_file(path, "a YAML scenario")
    monkeypatch.setenv("SPECSIM_MAX_YAML_BYTES", "5")
    assert yamlio.load_file(path, "a YAML scenario") == {"a": 1}


def test_missing_folder_and_non_utf8(tmp_path):
    with pytest.raises(safe_read.InputError, match="no such scenario file$"):
        safe_read.read_text(tmp_path / "none.yaml", "a YAML scenario", noun="scenario file")
    with pytest.raises(safe_read.InputError, match="is a folder, not a file"):
        safe_read.read_text(tmp_path, "a YAML scenario")
    (tmp_path / "b.yaml").write_bytes(b"a: \xff\n")
    with pytest.raises(safe_read.InputError, match="not a UTF-8 text file"):
        safe_read.read_text(tmp_path / "b.yaml", "a YAML scenario")


def _gz(path, data: bytes) -> None:
    with gzip.open(path, "wb") as fh:
        fh.write(data)


def test_stream_reads_plain_and_gzip_alike(tmp_path):
    data = b"".join(b"%d,%d,%d\n" % (i, i * 7 % 1000, i * 13 % 500) for i in range(50_000))
    (tmp_path / "t.csv").write_bytes(data)
    _gz(tmp_path / "t.csv.gz", data)
    for name in ("t.csv", "t.csv.gz"):
        with safe_read.open_binary(tmp_path / name, name) as fh:
            assert fh.read() == data
    with safe_read.open_text(tmp_path / "t.csv.gz", "t") as fh:
        assert sum(1 for _ in fh) == 50_000


def test_inflation_ratio(tmp_path, monkeypatch):
    _gz(tmp_path / "z.gz", b"0,1,1\n" * 2_000_000)  # 12 MB of one line: ~1000x
    with pytest.raises(safe_read.InputLimitError, match=r"z\.gz: gzip inflates it [0-9,]+x .*"
                       "SPECSIM_MAX_INFLATE_RATIO higher"), \
            safe_read.open_binary(tmp_path / "z.gz", "z.gz") as fh:
        while fh.read(65536):
            pass
    monkeypatch.setenv("SPECSIM_MAX_INFLATE_RATIO", "5000")
    assert len(safe_read.read_bytes(tmp_path / "z.gz", "a trace", inflate=True)) == 12_000_000


def test_inflated_size_cap(tmp_path, monkeypatch):
    _gz(tmp_path / "z.gz", b"1,2,3\n" * 1000)
    monkeypatch.setenv("SPECSIM_MAX_DATA_BYTES", "5999")  # 200 bytes on disk, 6000 inflated
    with pytest.raises(safe_read.InputLimitError, match="z.gz: decompresses to more bytes than "
                                                        "allowed"):
        safe_read.read_bytes(tmp_path / "z.gz", "a trace", inflate=True)
    monkeypatch.setenv("SPECSIM_MAX_DATA_BYTES", "6000")
    assert len(safe_read.read_bytes(tmp_path / "z.gz", "a trace", inflate=True)) == 6000


def test_truncated_gzip(tmp_path):
    _gz(tmp_path / "z.gz", b"1,2,3\n" * 1000)
    (tmp_path / "cut.gz").write_bytes((tmp_path / "z.gz").read_bytes()[:20])
    with pytest.raises(safe_read.InputError, match="not a readable gzip file"):
        safe_read.read_bytes(tmp_path / "cut.gz", "a trace", inflate=True)


@pytest.mark.parametrize("read", [1, 7, 4096, 1 << 20])
def test_line_cap_across_reads(tmp_path, monkeypatch, read):
    """The line length is counted however the reader slices the bytes: a line split over
    many reads, or several lines inside one read."""
    monkeypatch.setenv("SPECSIM_MAX_LINE_BYTES", "100")
    ok = b"a" * 100 + b"\n" + b"b" * 99 + b"\n" + b"c" * 100
    (tmp_path / "ok.csv").write_bytes(ok)
    with safe_read.open_binary(tmp_path / "ok.csv", "ok.csv") as fh:
        got = b"".join(iter(lambda: fh.read(read), b""))
    assert got == ok
    (tmp_path / "long.csv").write_bytes(ok + b"\n" + b"d" * 50 + b"\n" + b"e" * 101 + b"\n")
    with pytest.raises(safe_read.InputLimitError, match=r"^long\.csv line 5: a line longer "
                                                        r"than allowed \(limit 100 bytes"), \
            safe_read.open_binary(tmp_path / "long.csv", "long.csv") as fh:
        while fh.read(read):
            pass


def test_columns():
    assert safe_read.check_columns(["a", "b"], "f") == ["a", "b"]
    with pytest.raises(safe_read.InputError, match=r"^f: column 'b' appears twice \(columns 2 "
                                                   r"and 4\)"):
        safe_read.check_columns(["a", "b", "c", "b"], "f")
    with pytest.raises(safe_read.InputLimitError, match="a header of 1,001 columns"):
        safe_read.check_columns([f"c{i}" for i in range(1001)], "f")
    assert len(safe_read.check_columns([f"c{i}" for i in range(1000)], "f")) == 1000


def test_csv_header(tmp_path):
    (tmp_path / "t.csv").write_text('"a","b, c",a\n1,2,3\n')
    with pytest.raises(safe_read.InputError, match=r"t\.csv line 1: column 'a' appears twice"):
        safe_read.csv_header(tmp_path / "t.csv", "t.csv")
    (tmp_path / "u.csv").write_text('a,"b, c",,\n1,2,,\n')  # blank names: trailing commas
    assert safe_read.csv_header(tmp_path / "u.csv", "u.csv") == ["a", "b, c"]


def test_json_duplicate_keys():
    assert safe_read.json_loads('{"a": {"b": 1}, "c": [1, 1]}') == {"a": {"b": 1}, "c": [1, 1]}
    with pytest.raises(safe_read.DuplicateKeyError, match="b"):
        safe_read.json_loads('{"a": {"b": 1, "b": 2}}')


def test_docs_table_lists_every_cap():
    table = safe_read.docs_table()
    for cap in safe_read.CAPS:
        assert f"`{cap.env}`" in table
    assert table.count("\n") == len(safe_read.CAPS) + 1


def test_vllm_speculative_config_json_repeating_a_key():
    from specsim.simulator.speculation import engine_config

    assert engine_config.parse(engine_config.VLLM_KEY, '{"method": "eagle3"}') == {
        "method": "eagle3"}
    with pytest.raises(engine_config.EngineConfigError, match="key 'method' appears twice"):
        engine_config.parse(engine_config.VLLM_KEY, '{"method": "eagle3", "method": "ngram"}')


def test_size_cap_alone(tmp_path, monkeypatch):
    """``check_size`` bounds a file whose caller words its own read errors (plan --space)."""
    assert safe_read.check_size(tmp_path / "none.yaml", "a YAML space") == 0
    (tmp_path / "s.yaml").write_text("a: [1, 2]\n")
    assert safe_read.check_size(tmp_path / "s.yaml", "a YAML space") == 10
    monkeypatch.setenv("SPECSIM_MAX_YAML_BYTES", "9")
    with pytest.raises(safe_read.InputLimitError, match="s.yaml: 10 bytes, too large for a "
                                                        "YAML space"):
        safe_read.check_size(tmp_path / "s.yaml", "a YAML space")
