"""The request table: every request of a run as one row of a struct of numpy arrays.

A request is a row, not a coroutine (DESIGN.md, "The hot path"): workers hold arrays of row
indices and update columns with masked/fancy-indexed array operations.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from specsim.simulator.metrics import collector as metrics

PENDING, QUEUED, RUNNING, DONE, REJECTED = 0, 1, 2, 3, 4
STATUS_NAMES = {PENDING: "pending", QUEUED: "queued", RUNNING: "running", DONE: "completed",
                REJECTED: "rejected"}


class RequestTable:
    """Per-request inputs (from the trace) and state (filled in as the run goes)."""

    def __init__(self, trace: pd.DataFrame) -> None:
        n = len(trace)
        self.n = n
        self.request_id = trace["request_id"].to_numpy(np.int64)
        self.arrival = trace["arrival_s"].to_numpy(np.float64, copy=True)
        self.prompt = trace["prompt_tokens"].to_numpy(np.int64)
        self.output = trace["output_tokens"].to_numpy(np.int64)
        self.workload_class = trace["workload_class"].astype(str).to_numpy(object)
        self.temperature = (trace["temperature"].to_numpy(np.float64) if "temperature" in trace
                            else np.zeros(n))
        self.session_id = _column(trace, "session_id", -1, np.int64)
        self.turn = _column(trace, "turn", 0, np.int64)
        self.slo_tier = (trace["slo_tier"].astype(str).to_numpy(object) if "slo_tier" in trace
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

    def frame(self) -> pd.DataFrame:
        """One row per request, for requests.csv."""
        out_tokens = self.generated
        tpot = metrics.tpot(self.first_token, self.finish, out_tokens)
        return pd.DataFrame({
            "request_id": self.request_id,
            "workload_class": self.workload_class,
            "slo_tier": self.slo_tier,
            "session_id": self.session_id,
            "turn": self.turn,
            "status": pd.Series(self.status).map(STATUS_NAMES).to_numpy(),
            "worker": self.worker,
            "arrival_s": self.arrival,
            "first_token_s": self.first_token,
            "finish_s": self.finish,
            "prompt_tokens": self.prompt,
            "output_tokens_requested": self.output,
            "output_tokens": out_tokens,
            "accepted_tokens": self.accepted,
            "drafted_tokens": self.drafted,
            "bonus_tokens": self.bonus,
            "steps": self.steps,
            "preemptions": self.preemptions,
            "ttft_s": self.first_token - self.arrival,
            "tpot_s": tpot,
            "e2e_s": self.finish - self.arrival,
        })


def _column(trace: pd.DataFrame, name: str, default, dtype) -> np.ndarray:
    """A numeric trace column, or the schema default where the trace has none."""
    if name in trace:
        return trace[name].fillna(default).to_numpy(dtype)
    return np.full(len(trace), default, dtype)
