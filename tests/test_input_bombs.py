"""Input bombs through the CLI (issue #24): YAML alias bombs, gzip bombs, a huge line, a huge
header, duplicate keys and columns, files over a size cap, through ``run``, ``validate``,
``trace stats``, ``plan``, ``sweep --set`` and ``replay``. Each is exit 2 with one line,
within 500 MB of address space and 10 s, with nothing left where the output would go; an
input just under each cap still runs.

A child process imports specsim once (that keeps the file fast) and forks a fresh copy of
itself per case, which limits its address space with ``RLIMIT_AS`` (a case that would grow
past it fails with a MemoryError) and sets a 10 s alarm (a case still running is killed);
the child reports every case's exit status and error text as JSON.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

CHAT = REPO / "scenarios" / "chat.yaml"
MEMORY = 500 * 2**20  # address space for the child: the 500 MB
ALARM_S = 10

# One child runs every case: argv, extra environment, an output folder that must not appear.
CHILD = r"""
import contextlib, io, json, os, resource, signal, sys, traceback
from specsim.simulator.cli import main
for module in ("specsim.simulator.cluster.engine", "specsim.simulator.planning.sweep",
               "specsim.simulator.planning.plan", "specsim.traces.cli", "specsim.traces.stats"):
    try:  # imported once here, not in every case (a module that fails fails its cases)
        __import__(module)
    except Exception:
        pass

def case(argv, env):
    resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
    signal.alarm({alarm})  # its default action ends the process: no result, a failed case
    os.environ.update(env)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    except BaseException:
        rc = "raised"
        err.write(traceback.format_exc())
    return {{"rc": rc, "err": err.getvalue()}}

results = {{}}
for name, argv, env in json.load(open(sys.argv[1])):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a fresh copy of this process per case: its own memory limit and alarm
        os.close(read)
        with os.fdopen(write, "w") as out:
            json.dump(case(argv, env), out)
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as inp:
        text = inp.read()
    _, status = os.waitpid(pid, 0)
    results[name] = json.loads(text) if text else {{"rc": f"died (status {{status}})", "err": ""}}
json.dump(results, sys.stdout)
"""


def _chain(depth: int = 9, width: int = 9, leaf: str = "lol") -> str:
    """A flow-style YAML value of ``depth`` anchors, each listing the previous ``width``
    times: a few hundred bytes that expand to width**depth leaves."""
    parts = [f"&a0 [{', '.join([leaf] * width)}]"]
    parts += [f"&a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, depth)]
    return f"[{', '.join(parts)}]"


def _scenario(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text)
    return str(path)


def _with(key_line: str, replacement: str) -> str:
    text = CHAT.read_text()
    assert key_line in text
    return text.replace(key_line, replacement)


def _trace_scenario(tmp: Path, name: str, trace: Path) -> str:
    text = CHAT.read_text()
    start = text.index("workload:")
    end = text.index("slo:")
    return _scenario(tmp, name, text[:start] + f"workload:\n  trace: {{path: {trace}}}\n"
                     + text[end:])


def _cases(tmp: Path) -> dict[str, tuple[list[str], dict[str, str], str | None]]:
    """name -> (argv, environment, output folder that must not exist afterwards)."""
    out = tmp / "out"
    bomb = _chain()
    desc = "description: Open-ended chat traffic, EAGLE-3 speculation, Qwen3-8B on 1x H100"
    cases: dict[str, tuple[list[str], dict[str, str], str | None]] = {}

    # --- YAML alias bombs: name, description, acceptance notes, policy rules, --set, space
    s = _scenario(tmp, "bomb_desc.yaml", _with(desc, f"description: {bomb}"))
    cases["validate_alias_description"] = (["validate", s], {}, None)
    s = _scenario(tmp, "bomb_name.yaml", _with("name: chat-eagle3", f"name: {bomb}"))
    cases["run_alias_name"] = (["run", s, "--out", str(out / "a")], {}, str(out / "a"))
    s = _scenario(tmp, "bomb_rules.yaml", _with("  k: 4\n", f"  k: 4\n  policy_params: "
                                                 f"{{rules: {bomb}}}\n"))
    cases["run_alias_policy_rules"] = (["run", s, "--out", str(out / "b")], {}, str(out / "b"))
    prof = tmp / "acc_bomb.yaml"
    prof.write_text(f"mine:\n  method: eagle3\n  source: measured\n  notes: {bomb}\n"
                    "  alpha: 0.7\n")
    s = _scenario(tmp, "bomb_acc.yaml", _with("    profile: qwen3-8b-eagle3",
                                              f"    profile: {prof}#mine"))
    cases["validate_alias_acceptance_notes"] = (["validate", s], {}, None)
    cases["run_alias_set"] = (["run", str(CHAT), "--set", f"description={bomb}", "--out",
                               str(out / "c")], {}, str(out / "c"))
    cases["sweep_alias_set"] = (["sweep", str(CHAT), "--set", f"description={bomb}", "--out",
                                 str(out / "d")], {}, str(out / "d"))
    space = tmp / "space_bomb.yaml"
    space.write_text(f"speculation.k: {bomb}\n")
    cases["plan_alias_space"] = (["plan", str(CHAT), "--qps", "5", "--slo", "tpot_p99=0.05",
                                  "--space", str(space), "--out", str(out / "e")], {},
                                 str(out / "e"))
    s = _scenario(tmp, "self.yaml", _with(desc, "description: &me [*me]"))
    cases["validate_alias_recursive"] = (["validate", s], {}, None)

    # --- gzip bombs: a small .csv.gz that inflates ~500x
    gz = tmp / "bomb.csv.gz"
    with gzip.open(gz, "wb", compresslevel=9) as fh:
        fh.write(b"arrival_s,prompt_tokens,output_tokens\n")
        block = b"0.5,10,10\n" * 100_000
        for _ in range(50):  # 50 MB inflated, ~100 KB on disk
            fh.write(block)
    cases["trace_stats_gzip_bomb"] = (["trace", "stats", str(gz)], {}, None)
    s = _trace_scenario(tmp, "gz_trace.yaml", gz)
    cases["validate_gzip_bomb"] = (["validate", s], {}, None)
    cases["run_gzip_bomb"] = (["run", s, "--out", str(out / "f")], {}, str(out / "f"))

    # --- replay: a measured run that is a gzip bomb, one that repeats a key
    run = tmp / "run.json.gz"
    with gzip.open(run, "wb", compresslevel=9) as fh:
        fh.write(b'{"config": {}, "requests": [{"index": 0, "note": "' + b"0" * 50_000_000
                 + b'"}]}')
    cases["replay_gzip_bomb"] = (["replay", str(run), "--out", str(out / "h")], {},
                                 str(out / "h"))
    twice = tmp / "twice.json.gz"
    with gzip.open(twice, "wt") as fh:
        fh.write('{"config": {"block_size": 16, "block_size": 32}, "requests": []}')
    cases["replay_duplicate_json_key"] = (["replay", str(twice), "--out", str(out / "i")], {},
                                          str(out / "i"))

    # --- a single huge line; a huge repeated header; duplicate columns and keys
    huge = tmp / "huge_line.csv"
    huge.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n0.5,10,1" + b"0" * 30_000_000)
    cases["trace_stats_huge_line"] = (["trace", "stats", str(huge)], {}, None)
    header = tmp / "huge_header.csv"
    header.write_bytes(b",".join([b"arrival_s"] * 300_000) + b"\n0.5\n")
    cases["trace_stats_huge_header"] = (["trace", "stats", str(header)], {}, None)
    wide = tmp / "wide_header.csv"
    wide.write_text(",".join(f"c{i}" for i in range(5000)) + "\n" + ",".join(["1"] * 5000) + "\n")
    cases["trace_stats_too_many_columns"] = (["trace", "stats", str(wide)], {}, None)
    dup = tmp / "dup_columns.csv"
    dup.write_text("arrival_s,prompt_tokens,output_tokens,prompt_tokens\n0.5,10,10,20\n")
    cases["trace_stats_duplicate_column"] = (["trace", "stats", str(dup)], {}, None)
    dupj = tmp / "dup_keys.jsonl"
    dupj.write_text('{"arrival_s": 0.5, "prompt_tokens": 10, "output_tokens": 10}\n'
                    '{"arrival_s": 1.5, "prompt_tokens": 10, "output_tokens": 10, '
                    '"prompt_tokens": 5}\n')
    cases["trace_stats_duplicate_json_key"] = (["trace", "stats", str(dupj)], {}, None)
    s = _scenario(tmp, "dup_key.yaml", _with("seed: 7\n", "seed: 7\nseed: 8\n"))
    cases["validate_duplicate_yaml_key"] = (["validate", s], {}, None)
    cases["run_duplicate_key_in_trace"] = (["run", _trace_scenario(tmp, "dup_tr.yaml", dup),
                                            "--out", str(out / "g")], {}, str(out / "g"))

    # --- size caps
    big = _scenario(tmp, "big.yaml", CHAT.read_text() + "#" + "x" * (1024**2) + "\n")
    cases["validate_scenario_too_large"] = (["validate", big], {}, None)
    big_space = tmp / "big_space.yaml"
    big_space.write_text("speculation.k: [2, 4]\n#" + "x" * (1024**2) + "\n")
    cases["plan_space_too_large"] = (["plan", str(CHAT), "--qps", "5", "--slo",
                                      "tpot_p99=0.05", "--space", str(big_space), "--out",
                                      str(out / "j")], {}, str(out / "j"))
    plain = tmp / "plain.csv"
    plain.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{i * 0.1:.1f},100,100\n" for i in range(20_000)))
    cases["trace_stats_data_cap"] = (["trace", "stats", str(plain)],
                                     {"SPECSIM_MAX_DATA_BYTES": "100000"}, None)

    # --- just under each cap: these run
    uses = ", ".join(["*p"] * 9_990)  # aliases add 9,990 nodes (limit 10,000)
    s = _scenario(tmp, "under_alias.yaml", _with(
        "    prompt_tokens: {distribution: lognormal, mean: 161, sigma: 1.0, max: 8000}",
        f"    prompt_tokens: {{distribution: empirical, values: [&p 160, {uses}]}}"))
    cases["ok_run_aliases_under_budget"] = (
        ["run", s, "--set", "workload.synthetic.requests=30", "--no-report", "--out",
         str(out / "ok")], {}, None)
    s = _scenario(tmp, "under_size.yaml",
                  CHAT.read_text() + "#" + "x" * (1024**2 - len(CHAT.read_text()) - 10) + "\n")
    cases["ok_validate_scenario_under_size"] = (["validate", s], {}, None)
    line = tmp / "long_line.csv"
    line.write_text("arrival_s,prompt_tokens,output_tokens,note\n0.5,10,10,"
                    + "n" * (4 * 1024**2 - 100) + "\n1.0,10,10,short\n")
    cases["ok_trace_stats_line_under_cap"] = (["trace", "stats", str(line)], {}, None)
    cols = tmp / "cols_1000.csv"
    names = ["arrival_s", "prompt_tokens", "output_tokens"] + [f"c{i}" for i in range(997)]
    cols.write_text(",".join(names) + "\n" + ",".join(["1"] * 1000) + "\n")
    cases["ok_trace_stats_1000_columns"] = (["trace", "stats", str(cols)], {}, None)
    real_gz = tmp / "real.csv.gz"
    rows = "".join(f"{i * 0.173:.3f},{(i * 7919) % 2000 + 1},{(i * 104729) % 900 + 1}\n"
                   for i in range(120_000))  # ~2 MB of varied rows: inflates well under 100x
    with gzip.open(real_gz, "wt") as fh:
        fh.write("arrival_s,prompt_tokens,output_tokens\n" + rows)
    cases["ok_trace_stats_gzip"] = (["trace", "stats", str(real_gz)], {}, None)
    cases["ok_trace_stats_data_cap"] = (["trace", "stats", str(plain)],
                                        {"SPECSIM_MAX_DATA_BYTES": str(plain.stat().st_size)},
                                        None)
    return cases


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> tuple[dict, dict]:
    tmp = tmp_path_factory.mktemp("bombs")
    cases = _cases(tmp)
    spec = tmp / "cases.json"
    spec.write_text(json.dumps([[n, argv, env] for n, (argv, env, _) in cases.items()]))
    # RLIMIT_AS bounds address space, not memory in use: one thread pool and one malloc
    # arena keep reserved-but-unused address space from counting against the 500 MB
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", NUMBA_NUM_THREADS="1", MALLOC_ARENA_MAX="1")
    for cap in ("YAML_BYTES", "YAML_ALIAS_NODES", "DATA_BYTES", "INFLATE_RATIO",
                "LINE_BYTES", "COLUMNS"):
        env.pop(f"SPECSIM_MAX_{cap}", None)  # the defaults are under test
    child = CHILD.format(memory=MEMORY, alarm=ALARM_S)
    proc = subprocess.run([sys.executable, "-c", child, str(spec)], capture_output=True,
                          text=True, cwd=REPO, env=env, timeout=ALARM_S * (len(cases) + 3))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), cases


BOMBS = {
    "validate_alias_description": "SPECSIM_MAX_YAML_ALIAS_NODES",
    "run_alias_name": "SPECSIM_MAX_YAML_ALIAS_NODES",
    "run_alias_policy_rules": "SPECSIM_MAX_YAML_ALIAS_NODES",
    "validate_alias_acceptance_notes": "SPECSIM_MAX_YAML_ALIAS_NODES",
    "run_alias_set": "--set description: YAML aliases",
    "sweep_alias_set": "--set description: YAML aliases",
    "plan_alias_space": "SPECSIM_MAX_YAML_ALIAS_NODES",
    "validate_alias_recursive": "holds itself",
    "trace_stats_gzip_bomb": "SPECSIM_MAX_INFLATE_RATIO",
    "validate_gzip_bomb": "SPECSIM_MAX_INFLATE_RATIO",
    "run_gzip_bomb": "SPECSIM_MAX_INFLATE_RATIO",
    "replay_gzip_bomb": "SPECSIM_MAX_INFLATE_RATIO",
    "replay_duplicate_json_key": "twice.json.gz: key 'block_size' appears twice in one object",
    "trace_stats_huge_line": "huge_line.csv line 2: a line longer than allowed",
    "trace_stats_huge_header": "SPECSIM_MAX_COLUMNS",
    "trace_stats_too_many_columns": "a header of 5,000 columns",
    "trace_stats_duplicate_column": "column 'prompt_tokens' appears twice (columns 2 and 4)",
    "trace_stats_duplicate_json_key": "dup_keys.jsonl line 2: field 'prompt_tokens' appears twice",
    "validate_duplicate_yaml_key": "dup_key.yaml line 8: not valid YAML (duplicate key 'seed' "
                                   "(first at line 7)",
    "run_duplicate_key_in_trace": "appears twice",
    "validate_scenario_too_large": "SPECSIM_MAX_YAML_BYTES",
    "plan_space_too_large": "big_space.yaml: 1,048,600 bytes, too large for a YAML space",
    "trace_stats_data_cap": "holds more bytes than allowed (limit 97.7 KiB, set by "
                            "SPECSIM_MAX_DATA_BYTES",
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_bomb_is_one_line_exit_2(results, name):
    got, cases = results
    rc, err = got[name]["rc"], got[name]["err"]
    lines = err.strip().splitlines()
    assert rc == 2, f"{name}: exit {rc}\n{err[-2000:]}"
    assert len(lines) == 1 and lines[0].startswith("specsim: error: "), err[-2000:]
    assert BOMBS[name] in lines[0]
    out = cases[name][2]
    assert out is None or not Path(out).exists(), f"{name}: left {sorted(os.listdir(out))}"


def test_limit_messages_name_the_way_out(results):
    got, _ = results
    for name, expected in BOMBS.items():
        if expected.startswith("SPECSIM_MAX_"):
            assert f"set {expected} higher)" in got[name]["err"], got[name]["err"]


@pytest.mark.parametrize("name", ["ok_run_aliases_under_budget", "ok_validate_scenario_under_size",
                                  "ok_trace_stats_line_under_cap", "ok_trace_stats_1000_columns",
                                  "ok_trace_stats_gzip", "ok_trace_stats_data_cap"])
def test_just_under_the_cap_runs(results, name):
    got, _ = results
    assert got[name]["rc"] in (0, None), got[name]["err"][-3000:]
