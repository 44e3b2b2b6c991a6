"""The request table: every request of a run as one row of a struct of numpy arrays.

A request is a row, not a coroutine (DESIGN.md, "The hot path"): workers hold arrays of row
indices and update columns with masked/fancy-indexed array operations.
"""

from __future__ import annotations

import numpy as np

from specsim.simulator.execution.loop_rules import DONE, PENDING, QUEUED, REJECTED, RUNNING
from specsim.simulator.metrics import collector as metrics
from specsim.traces.schema import Trace

STATUS_NAMES = {PENDING: "pending", QUEUED: "queued", RUNNING: "running", DONE: "completed",
                REJECTED: "rejected"}
#: status code -> its name in requests.csv, as an array indexed by the codes
STATUS_TEXT = np.array([STATUS_NAMES[c] for c in range(len(STATUS_NAMES))], dtype=object)


class RequestTable:
    """Per-request inputs (from the trace) and state (filled in as the run goes)."""

    def __init__(self, trace: Trace) -> None:
        n = len(trace)
        self.n = n
        self.request_id = np.asarray(trace["request_id"], np.int64)
        self.arrival = np.array(trace["arrival_s"], np.float64)  # a copy: closed loops write it
        self.prompt = np.asarray(trace["prompt_tokens"], np.int64)
        self.output = np.asarray(trace["output_tokens"], np.int64)
        self.workload_class = _text_column(trace["workload_class"])
        self.temperature = (np.asarray(trace["temperature"], np.float64)
                            if "temperature" in trace else np.zeros(n))
        self.session_id = _column(trace, "session_id", -1, np.int64)
        self.turn = _column(trace, "turn", 0, np.int64)
        self.slo_tier = (_text_column(trace["slo_tier"]) if "slo_tier" in trace
                         else np.full(n, "standard", object))
        # prefix block ids, ragged, as CSR: request i's ids are prefix_ids[ptr[i]:ptr[i+1]]
        blocks = trace["prefix_block_ids"] if "prefix_block_ids" in trace else None
        lengths = (np.fromiter((len(b) for b in blocks), np.int64, n) if blocks is not None
                   else np.zeros(n, np.int64))
        self.prefix_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(lengths, out=self.prefix_ptr[1:])
        self.prefix_ids = (np.fromiter((i for b in blocks for i in b), np.int64,
                                       int(self.prefix_ptr[-1]))
                           if blocks is not None else np.zeros(0, np.int64))
        # filled by the engine before the run
        self.cls_idx = np.zeros(n, np.int64)
        self.alpha_scale = np.ones(n)
        self.accept_key = np.zeros(n, np.uint64)
        self.match_key = np.zeros(n, np.uint64)
        # state
        self.status = np.full(n, PENDING, np.int8)
        self.reject_reason = np.zeros(n, np.int8)
        self.worker = np.full(n, -1, np.int64)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.last_delivery = np.full(n, np.nan)
        self.generated = np.zeros(n, np.int64)
        self.accepted = np.zeros(n, np.int64)  # drafted tokens the target accepted
        self.bonus = np.zeros(n, np.int64)  # tokens the target itself sampled (1 per step)
        self.drafted = np.zeros(n, np.int64)
        self.steps = np.zeros(n, np.int64)  # decode (verification) steps
        self.kv_len = np.zeros(n, np.int64)  # tokens whose KV is in the cache
        self.prefill_target = self.prompt.copy()  # KV tokens needed before decoding
        self.blocks = np.zeros(n, np.int64)
        self.preemptions = np.zeros(n, np.int64)
        # its KV came whole over a link (cluster/pd.py, a Handoff): a worker admits it
        # without a prefix match and keeps the KV it brought
        self.kv_landed = np.zeros(n, bool)
        # why the router placed it (Decision.reason), as a code into route_reasons
        self.route_code = np.full(n, -1, np.int32)
        self.route_reasons: dict[str, int] = {}

    def reason_code(self, reason: str) -> int:
        """The code of a routing reason (each distinct text stored once)."""
        return self.route_reasons.setdefault(reason, len(self.route_reasons))

    def routed(self, rid: int, reason: str) -> None:
        """Record why request ``rid`` went where it did (requests.csv ``route_reason``)."""
        self.route_code[rid] = self.reason_code(reason)

    def route_reason(self, codes: np.ndarray | None = None) -> np.ndarray:
        """The reasons of ``codes`` (default: each request's), "" where none was recorded."""
        names = np.array(["", *self.route_reasons], object)
        return names[(self.route_code if codes is None else codes) + 1]

    def prefix_blocks(self, rid: int) -> np.ndarray:
        """The prefix block ids of one request (empty when the trace has none)."""
        return self.prefix_ids[self.prefix_ptr[rid]:self.prefix_ptr[rid + 1]]

    def columns(self, rows: slice = slice(None)) -> dict[str, np.ndarray]:
        """requests.csv's columns by name, one row per request (``rows``: those requests
        only, so the file can be written a block at a time), as numpy arrays: the writer
        needs no frame, ``Result.requests`` builds one from them."""
        out_tokens = self.generated[rows]
        first, finish, arrival = self.first_token[rows], self.finish[rows], self.arrival[rows]
        tpot = metrics.tpot(first, finish, out_tokens)
        return {
            "request_id": self.request_id[rows],
            "workload_class": self.workload_class[rows],
            "slo_tier": self.slo_tier[rows],
            "session_id": self.session_id[rows],
            "turn": self.turn[rows],
            "status": STATUS_TEXT[self.status[rows]],
            "worker": self.worker[rows],
            "arrival_s": arrival,
            "first_token_s": first,
            "finish_s": finish,
            "prompt_tokens": self.prompt[rows],
            "output_tokens_requested": self.output[rows],
            "output_tokens": out_tokens,
            "accepted_tokens": self.accepted[rows],
            "drafted_tokens": self.drafted[rows],
            "bonus_tokens": self.bonus[rows],
            "steps": self.steps[rows],
            "preemptions": self.preemptions[rows],
            "ttft_s": first - arrival,
            "tpot_s": tpot,
            "e2e_s": finish - arrival,
        }


def _text_column(column: np.ndarray) -> np.ndarray:
    """A text column as an object array whose rows share one string per distinct value (a
    per-row copy of "chat" costs a million-request run ~60 MB per column)."""
    shared: dict[str, str] = {}
    out = np.empty(len(column), dtype=object)
    out[:] = [shared.setdefault(v, v) for v in map(str, column)]
    return out


def _column(trace: Trace, name: str, default, dtype) -> np.ndarray:
    """A numeric trace column (missing cells: ``default``), or ``default`` throughout where
    the trace has none."""
    if name not in trace:
        return np.full(len(trace), default, dtype)
    col = trace[name]
    if col.dtype.kind == "f":
        col = np.where(np.isnan(col), default, col)
    elif col.dtype == object:
        col = np.array([default if v is None or v != v else v for v in col])
    return np.asarray(col, dtype)
