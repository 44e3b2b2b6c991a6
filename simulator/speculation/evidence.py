"""Acceptance as evidence: per-request, per-round acceptance counts -> a posterior.

``specsim acceptance posterior FILE --format csv|prometheus|sglang|profile`` reads what an
engine measured and holds, per (model, drafter, drafter precision, class, temperature), a
posterior over the acceptance curve instead of one number; ``--out`` writes its posterior
mean as a profile the simulator loads like any other (``speculation: {acceptance: {profile:
FILE.yaml}}``) and the posterior itself in a sidecar, ``FILE.posterior.yaml`` (the profile
loader refuses keys it does not know, so the posterior cannot live inside the profile).

The data: a round is one draft of k tokens and its verification; it accepted A of them
(0 <= A <= k, the first rejection ends it). Position j (1..k) was *at risk* in a round that
drafted it and accepted every position before it (k >= j and A >= j - 1), and *accepted*
when A >= j. Over a class's rounds, n_j rounds were at risk at j and s_j accepted it.

The model:

- **Per position, conjugate Beta.** The conditional acceptance alpha_j = P(accept j |
  accepted 1..j-1) has the prior Beta(1, 1) (uniform: worth two rounds, weak against any
  real log) and, with independent rounds, the posterior Beta(1 + s_j, 1 + n_j - s_j). The
  survival curve is S_j = alpha_1 ... alpha_j and tau(k) = 1 + S_1 + ... + S_k (bonus token
  included); past the last measured position the last alpha holds (the profile loader's
  rule).
- **Requests differ.** A request that accepts well keeps accepting, so rounds of one
  request are not independent. Each request r has its own alpha_r ~ Beta(mu c, (1 - mu) c);
  its rounds' accepted positions are Bernoulli(alpha_r) trials until the first rejection.
  (mu, c) are fitted by the Beta-binomial marginal likelihood: request r with S_r accepted
  and F_r rejected positions contributes B(mu c + S_r, (1 - mu) c + F_r) / B(mu c, (1 - mu)
  c) (the stopping rule, "until the first rejection or k", leaves the likelihood's shape in
  alpha unchanged), maximised with ``scipy.optimize``. rho = 1 / (1 + c) is the correlation
  of two trials of one request; c is what a scenario gives as ``per_request: {distribution:
  beta, concentration: c}`` to simulate the spread.
- **Effective sample size.** With m_rj trials of request r at position j, the variance of the
  pooled alpha_j is the independent one times the design effect D_j = 1 + (m_j - 1) rho,
  m_j = sum_r m_rj^2 / sum_r m_rj (Kish's, for clusters of unequal size). The posterior is
  Beta(1 + s_j / D_j, 1 + (n_j - s_j) / D_j): n_j / D_j effective rounds. Aggregate counters
  (vLLM's Prometheus text) carry no per-request information: D is 1 (independent rounds)
  unless ``design_effect`` is given, and the notes say the band is then a lower bound.
- **Positions move together.** The part (D_j - 1) / D_j of each position's posterior
  variance comes from which requests were seen and is shared across positions (a request
  that accepts well does so at every position); the rest, the binomial noise of rounds, is
  independent. Draws use a Gaussian copula with a common factor of weight (D_j - 1) / D_j
  and Beta marginals, so a band of tau is neither the independent-positions one (too
  narrow) nor a fully correlated one.

Draws come from a seeded ``numpy.random.Generator``; ``tau_band`` gives P10/P50/P90. The
profile's point value is the posterior mean of each alpha_j, and its tau (``tau_mean``) is
the tau of those means; the mean of the draws' tau differs from it only by the copula's
correlation between positions (0.003 on the 200 rounds of ``tests/data``'s chat class).

A bundled profile from a paper (``--format profile NAME``) keeps its point value and says
"point value, no posterior"; so does a profile file without its sidecar.

Inputs (every error is one line naming the file and the line or row and column):

(a) ``csv``: one row per round, a header naming the columns, ``#`` comments:
    ``request_id`` and either ``a0..aD-1`` (1 if draft position j+1 was accepted, 0 if not,
    blank if not drafted; a round accepts a prefix) or ``accepted`` with ``k``; optionally
    ``class``, ``turn``, ``round``, ``accepted`` (checked against the a-columns), ``k``,
    ``model``, ``drafter``, ``drafter_precision`` and ``temperature``. Rows of one
    ``request_id`` are one request (its turns included: conservative).
(b) ``prometheus``: vLLM's ``/metrics`` text, read by ``acceptance_import.parse_prometheus``
    (``vllm:spec_decode_num_drafts_total`` and ``..._accepted_tokens_per_pos_total``):
    n_1 = drafts, n_j = per_pos[j-2], s_j = per_pos[j-1]. Aggregate: no heterogeneity.
(c) ``sglang``: SGLang ``/generate`` responses (a JSON array or JSON lines), each with
    ``meta_info.spec_accept_histogram`` (H[n] = the request's verify steps that accepted n
    drafts, n = 0..k; ``spec_correct_drafts_histogram`` is read too): one request per
    record, k = len(H) - 1. ``class`` (and ``temperature``) may sit on the record or in
    ``meta_info``.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specsim import safe_read
from specsim.errors import ScenarioError

from .acceptance import MAX_K, ClassAcceptance, parse_profile

FORMATS = ("csv", "prometheus", "sglang", "profile")
#: Beta(PRIOR) on every conditional alpha: uniform, worth two rounds
PRIOR = (1.0, 1.0)
DRAWS = 4000
#: concentration above which the fit finds no spread beyond binomial noise
C_NONE = 1e5
_C_BOUNDS = (1e-2, 1e6)
SIDECAR_SUFFIX = ".posterior.yaml"
POINT = "point value, no posterior"


# ---------------------------------------------------------------- keys and evidence


@dataclass(frozen=True, order=True)
class Key:
    """What a posterior is of: one (model, drafter, drafter precision, class, temperature)."""

    model: str = ""
    drafter: str = ""
    precision: str = ""
    cls: str = "default"
    temperature: float = 0.0

    def label(self) -> str:
        parts = [f"{n} {v}" for n, v in (("model", self.model), ("drafter", self.drafter),
                                          ("weights", self.precision)) if v]
        parts.append(f"T {self.temperature:g}")
        return f"{self.cls} ({', '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model or None, "drafter": self.drafter or None,
                "drafter_precision": self.precision or None, "class": self.cls,
                "temperature": self.temperature}


@dataclass
class Evidence:
    """One key's counts: per position (n_j at risk, s_j accepted), per request where known."""

    key: Key
    at_risk: np.ndarray  # n_j, j = 1..k
    accepted: np.ndarray  # s_j
    rounds: int
    requests: int | None  # None: aggregate counters
    req_at_risk: np.ndarray | None = None  # (requests x k): m_rj
    req_accepted: np.ndarray | None = None
    source: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def k(self) -> int:
        return len(self.at_risk)


def from_rounds(key: Key, request: Any, accepted: Any, drafted: Any, source: str = "",
                notes: list[str] | None = None) -> Evidence:
    """Evidence from one row per round: its request, accepted count A and draft length k."""
    req = np.asarray(request)
    a = np.asarray(accepted, dtype=np.int64)
    kk = np.asarray(drafted, dtype=np.int64)
    if not (len(req) == len(a) == len(kk)) or not len(a):
        raise ScenarioError(f"{key.cls}: expected one request, accepted and k per round")
    if (kk < 1).any() or (kk > MAX_K).any() or (a < 0).any() or (a > kk).any():
        raise ScenarioError(f"{key.cls}: expected 0 <= accepted <= k and 1 <= k <= {MAX_K}")
    k = int(kk.max())
    j = np.arange(1, k + 1)
    risk = (kk[:, None] >= j) & (a[:, None] >= j - 1)
    acc = a[:, None] >= j
    _, inv = np.unique(req, return_inverse=True)
    n_req = int(inv.max()) + 1
    req_risk = np.stack([np.bincount(inv, weights=risk[:, i], minlength=n_req)
                         for i in range(k)], axis=1)
    req_acc = np.stack([np.bincount(inv, weights=acc[:, i], minlength=n_req)
                        for i in range(k)], axis=1)
    return Evidence(key, risk.sum(0).astype(float), acc.sum(0).astype(float), len(a), n_req,
                    req_risk, req_acc, source, list(notes or []))


# ---------------------------------------------------------------- heterogeneity


@dataclass(frozen=True)
class Heterogeneity:
    """Per-request alpha ~ Beta(mean c, (1 - mean) c), fitted by marginal likelihood."""

    mean_alpha: float
    concentration: float | None  # None: no spread beyond binomial noise detected
    requests: int

    @property
    def rho(self) -> float:
        """Correlation of two trials (accepted/rejected positions) of one request."""
        return 0.0 if self.concentration is None else 1.0 / (1.0 + self.concentration)

    def text(self) -> str:
        if self.concentration is None:
            return (f"per-request alpha: no spread beyond binomial noise over {self.requests} "
                    f"requests (mean {self.mean_alpha:.3f}; rho 0)")
        sd = math.sqrt(self.mean_alpha * (1 - self.mean_alpha) * self.rho)
        return (f"per-request alpha ~ Beta(mean {self.mean_alpha:.3f}, concentration "
                f"{self.concentration:.3g}): sd {sd:.3f} across {self.requests} requests, "
                f"rho {self.rho:.3f}")

    def to_dict(self) -> dict[str, Any]:
        return {"model": "per-request alpha ~ Beta(mean c, (1 - mean) c)",
                "fit": "Beta-binomial marginal likelihood (scipy.optimize, Nelder-Mead)",
                "mean_alpha": _r(self.mean_alpha),
                "concentration": None if self.concentration is None else _r(self.concentration),
                "rho": _r(self.rho), "requests": self.requests}


def fit_heterogeneity(successes: Any, failures: Any) -> Heterogeneity | None:
    """(mean, concentration) of a Beta over requests' alphas from each request's accepted
    (S_r) and rejected (F_r) positions; None where the data cannot tell (fewer than 3
    requests, or no acceptance or no rejection at all)."""
    s = np.asarray(successes, float)
    f = np.asarray(failures, float)
    keep = (s + f) > 0
    s, f = s[keep], f[keep]
    if len(s) < 3 or s.sum() <= 0 or f.sum() <= 0:
        return None
    from scipy.optimize import minimize
    from scipy.special import betaln, expit, logit

    mu0 = float(s.sum() / (s + f).sum())
    pairs, weight = np.unique(np.stack([s, f], axis=1), axis=0, return_counts=True)
    ps, pf = pairs[:, 0], pairs[:, 1]  # requests with the same counts share a term

    def nll(theta: np.ndarray) -> float:
        mu, c = float(expit(theta[0])), math.exp(theta[1])
        a, b = mu * c, (1.0 - mu) * c
        return -float(np.sum(weight * (betaln(a + ps, b + pf) - betaln(a, b))))

    bounds = [(-30.0, 30.0), (math.log(_C_BOUNDS[0]), math.log(_C_BOUNDS[1]))]
    best = None
    for c0 in (3.0, 300.0):  # two starts: the likelihood can be flat in c
        res = minimize(nll, np.array([float(logit(min(max(mu0, 1e-6), 1 - 1e-6))),
                                      math.log(c0)]), method="Nelder-Mead", bounds=bounds,
                       options={"xatol": 1e-5, "fatol": 1e-7, "maxiter": 2000})
        if best is None or res.fun < best.fun:
            best = res
    assert best is not None
    mu, c = float(expit(best.x[0])), math.exp(float(best.x[1]))
    return Heterogeneity(mu, None if c >= C_NONE else c, int(len(s)))


def design_effects(req_at_risk: np.ndarray, rho: float) -> np.ndarray:
    """Kish's design effect per position: 1 + (m_j - 1) rho, m_j = sum m_rj^2 / sum m_rj."""
    tot = req_at_risk.sum(0)
    m = np.where(tot > 0, (req_at_risk ** 2).sum(0) / np.maximum(tot, 1e-300), 1.0)
    return 1.0 + np.maximum(m - 1.0, 0.0) * rho


# ---------------------------------------------------------------- the posterior


def _extend(cond: np.ndarray, k: int) -> np.ndarray:
    """Conditional alphas at positions 1..k: past the last measured one the last holds."""
    if cond.shape[-1] >= k:
        return cond[..., :k]
    pad = np.repeat(cond[..., -1:], k - cond.shape[-1], axis=-1)
    return np.concatenate([cond, pad], axis=-1)


@dataclass
class Posterior:
    """A key's posterior over conditional alphas (Beta per position + a common factor)."""

    key: Key
    at_risk: np.ndarray
    accepted: np.ndarray
    design_effect: np.ndarray  # D_j
    rounds: int
    requests: int | None
    heterogeneity: Heterogeneity | None
    prior: tuple[float, float] = PRIOR
    design_effect_given: bool = False
    source: str = ""
    notes: list[str] = field(default_factory=list)
    kind: str = "posterior"

    @property
    def k(self) -> int:
        return len(self.at_risk)

    @property
    def effective_rounds(self) -> float:
        """Rounds the first position's posterior is worth: n_1 / D_1."""
        return float(self.at_risk[0] / self.design_effect[0])

    def beta_params(self) -> tuple[np.ndarray, np.ndarray]:
        a0, b0 = self.prior
        d = self.design_effect
        return a0 + self.accepted / d, b0 + (self.at_risk - self.accepted) / d

    def mean_alphas(self) -> np.ndarray:
        a, b = self.beta_params()
        return a / (a + b)

    def tau_mean(self, k: int) -> float:
        """tau at k of the posterior-mean alphas (the written profile's tau)."""
        return 1.0 + float(np.cumprod(_extend(self.mean_alphas(), k)).sum())

    def alpha_draws(self, n: int = DRAWS, seed: int = 0) -> np.ndarray:
        """(n x k) conditional alphas from the posterior: Beta marginals, the share
        (D_j - 1) / D_j of each position's variance common to all positions."""
        from scipy.special import betaincinv, ndtr  # Beta's ppf, the normal cdf

        rng = np.random.default_rng(seed)
        a, b = self.beta_params()
        lam = np.clip((self.design_effect - 1.0) / self.design_effect, 0.0, 1.0)
        z = (np.sqrt(lam) * rng.standard_normal((n, 1))
             + np.sqrt(1.0 - lam) * rng.standard_normal((n, self.k)))
        u = np.clip(ndtr(z), 1e-15, 1 - 1e-15)
        return betaincinv(a, b, u)

    def tau_draws(self, k: int, n: int = DRAWS, seed: int = 0) -> np.ndarray:
        return 1.0 + np.cumprod(_extend(self.alpha_draws(n, seed), k), axis=1).sum(axis=1)

    def survival_draws(self, k: int, n: int = DRAWS, seed: int = 0) -> np.ndarray:
        return np.cumprod(_extend(self.alpha_draws(n, seed), k), axis=1)

    def tau_band(self, k: int, n: int = DRAWS, seed: int = 0) -> tuple[float, float, float]:
        p10, p50, p90 = np.percentile(self.tau_draws(k, n, seed), [10, 50, 90])
        return float(p10), float(p50), float(p90)

    def request_tpot_cv(self, k: int, n: int = 20_000, seed: int = 0) -> float:
        """The spread across requests of 1 / tau_r (a request's TPOT under speculation, up to
        the step cost) from the fitted heterogeneity: alpha_r / mean scales every position's
        posterior-mean alpha (capped at 1), as ``per_request`` does in a run. 0 without a
        detected spread."""
        h = self.heterogeneity
        if h is None or h.concentration is None:
            return 0.0
        rng = np.random.default_rng(seed)
        m = min(max(h.mean_alpha, 1e-6), 1 - 1e-6)
        scale = rng.beta(m * h.concentration, (1 - m) * h.concentration, n) / m
        cond = np.clip(_extend(self.mean_alphas(), k)[None, :] * scale[:, None], 0.0, 1.0)
        inv = 1.0 / (1.0 + np.cumprod(cond, axis=1).sum(axis=1))
        return float(inv.std() / inv.mean())

    def to_dict(self, k: int | None = None, seed: int = 0, draws: int = DRAWS) -> dict[str, Any]:
        k = k or self.k
        p10, p50, p90 = self.tau_band(k, draws, seed)
        return {"key": self.key.to_dict(), "kind": self.kind, "rounds": self.rounds,
                "requests": self.requests,
                "prior": {"distribution": "beta", "a": self.prior[0], "b": self.prior[1],
                          "of": "each conditional alpha_j"},
                "at_risk": [_r(x) for x in self.at_risk],
                "accepted": [_r(x) for x in self.accepted],
                "design_effect": [_r(x) for x in self.design_effect],
                "design_effect_given": self.design_effect_given,
                "effective_rounds": _r(self.effective_rounds),
                "heterogeneity": None if self.heterogeneity is None
                else self.heterogeneity.to_dict(),
                "alpha_mean": [_r(x) for x in self.mean_alphas()],
                "tau": {"k": k, "mean": _r(self.tau_mean(k)), "p10": _r(p10), "p50": _r(p50),
                        "p90": _r(p90), "draws": draws, "seed": seed},
                "source": self.source, "notes": list(self.notes)}


@dataclass
class PointValue:
    """A profile's class without a posterior (a paper's figure): its tau has no band."""

    key: Key
    acc: ClassAcceptance
    profile: str
    kind: str = POINT
    rounds: int | None = None
    requests: int | None = None
    heterogeneity: Heterogeneity | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def k(self) -> int:
        return self.acc.at_k or 1

    def tau_mean(self, k: int) -> float:
        return self.acc.tau_at(k)

    def tau_draws(self, k: int, n: int = DRAWS, seed: int = 0) -> np.ndarray:
        return np.full(n, self.acc.tau_at(k))

    def tau_band(self, k: int, n: int = DRAWS, seed: int = 0) -> tuple[float, float, float]:
        t = self.acc.tau_at(k)
        return t, t, t

    def request_tpot_cv(self, k: int, n: int = 0, seed: int = 0) -> float:
        return 0.0

    def to_dict(self, k: int | None = None, seed: int = 0, draws: int = DRAWS) -> dict[str, Any]:
        k = k or self.k
        return {"key": self.key.to_dict(), "kind": self.kind, "profile": self.profile,
                "summary": self.acc.summary, "source": self.acc.source,
                "tau": {"k": k, "mean": _r(self.tau_mean(k))}, "notes": list(self.notes)}


def fit(ev: Evidence, prior: tuple[float, float] = PRIOR,
        design_effect: float | None = None) -> Posterior:
    """The posterior of one key's evidence (``design_effect``: given instead of fitted)."""
    notes = list(ev.notes)
    het = None
    if ev.req_at_risk is not None and ev.req_accepted is not None:
        s = ev.req_accepted.sum(1)
        het = fit_heterogeneity(s, ev.req_at_risk.sum(1) - s)
        if het is None:
            notes.append("heterogeneity not identified (fewer than 3 requests, or none "
                         "rejected or none accepted): rounds taken as independent")
    if design_effect is not None:
        d = np.full(ev.k, float(design_effect))
        notes.append(f"design effect {design_effect:g} given (not fitted)")
    elif het is not None and ev.req_at_risk is not None:
        d = design_effects(ev.req_at_risk, het.rho)
    else:
        d = np.ones(ev.k)
        if ev.requests is None:
            notes.append("aggregate counters carry no per-request information: rounds taken "
                         "as independent (design effect 1), so the band is a lower bound on "
                         "the uncertainty; give --design-effect from a per-request log of "
                         "the same traffic")
    return Posterior(ev.key, ev.at_risk, ev.accepted, d, ev.rounds, ev.requests, het, prior,
                     design_effect is not None, ev.source, notes)


# ---------------------------------------------------------------- (a) per-round CSV

_CSV_TEXT = ("request_id", "class", "model", "drafter", "drafter_precision")
_CSV_NUM = ("turn", "round", "accepted", "k", "temperature")
_A_COL = re.compile(r"a(\d+)")


def _group_filter(groups: dict[Key, list[list[Any]]], cls: str | None, origin: str,
                  seen_classes: set[str]) -> dict[Key, list[list[Any]]]:
    if cls is not None:
        groups = {k: v for k, v in groups.items() if k.cls == cls}
        if not groups:
            raise ScenarioError(f"--class: {origin} has no rounds of class {cls!r} (has: "
                                f"{', '.join(sorted(seen_classes))})")
    if not groups:
        raise ScenarioError(f"{origin}: no rounds")
    return groups


def read_csv_rounds(path: str | Path, cls: str | None = None,
                    temperature: float | None = None) -> list[Evidence]:
    """One row per round (see the module docstring) -> evidence per key."""
    path = Path(path)
    origin = str(path)
    safe_read.check_file(path, "a per-round acceptance CSV", safe_read.DATA_BYTES)
    header: list[str] | None = None
    idx: dict[str, int] = {}
    a_cols: list[int] = []
    groups: dict[Key, list[list[Any]]] = {}
    seen_ids: set[tuple[str, int, int]] = set()
    classes: set[str] = set()
    with safe_read.open_text(path, origin) as fh:
        reader = csv.reader(fh)
        while True:
            try:
                cells = next(reader, None)
            except csv.Error as exc:
                raise ScenarioError(f"{origin} line {reader.line_num}: cannot read the row "
                                    f"({exc})") from None
            if cells is None:
                break
            n = reader.line_num
            if not cells or all(not c.strip() for c in cells) or cells[0].lstrip().startswith(
                    "#"):
                continue
            cells = [c.strip() for c in cells]
            if header is None:
                header = safe_read.check_columns([c.lower() for c in cells], f"{origin} line {n}")
                idx, a_cols = _csv_header(header, origin, n)
                continue
            if len(cells) != len(header):
                raise ScenarioError(f"{origin} line {n}: expected {len(header)} columns, got "
                                    f"{len(cells)}")
            row = _csv_row(cells, idx, a_cols, origin, n, temperature)
            rid, key, acc, k, turn, rnd = row
            classes.add(key.cls)
            if "round" in idx:
                tag = (rid, turn, rnd)
                if tag in seen_ids:
                    raise ScenarioError(f"{origin} line {n}: request {rid!r} turn {turn} round "
                                        f"{rnd} appears twice")
                seen_ids.add(tag)
            groups.setdefault(key, [[], [], []])
            g = groups[key]
            g[0].append(rid)
            g[1].append(acc)
            g[2].append(k)
    if header is None:
        raise ScenarioError(f"{origin}: empty (expected a header: request_id, class, turn, "
                            "round, accepted, a0..aD-1)")
    groups = _group_filter(groups, cls, origin, classes)
    src = f"per-round CSV {path.name}"
    return [from_rounds(key, np.array(g[0], dtype=object).astype(str), g[1], g[2], src)
            for key, g in sorted(groups.items())]


def _csv_header(header: list[str], origin: str, n: int) -> tuple[dict[str, int], list[int]]:
    idx: dict[str, int] = {}
    a: dict[int, int] = {}
    for i, name in enumerate(header):
        m = _A_COL.fullmatch(name)
        if m:
            a[int(m.group(1))] = i
        elif name in _CSV_TEXT or name in _CSV_NUM:
            idx[name] = i
        else:
            raise ScenarioError(f"{origin} line {n}: column {name!r}: unknown (expected "
                                "request_id, class, turn, round, accepted, k, a0..aD-1, model, "
                                "drafter, drafter_precision, temperature)")
    if "request_id" not in idx:
        raise ScenarioError(f"{origin} line {n}: no request_id column (rounds of one request "
                            "are correlated: the posterior needs to know which they are)")
    if a:
        if sorted(a) != list(range(len(a))):
            missing = next(j for j in range(len(a) + 1) if j not in a)
            raise ScenarioError(f"{origin} line {n}: column a{missing}: missing (expected "
                                f"a0..a{max(a)} with none missing)")
        if len(a) > MAX_K:
            raise ScenarioError(f"{origin} line {n}: {len(a)} position columns; at most "
                                f"{MAX_K} supported")
    elif not {"accepted", "k"} <= set(idx):
        raise ScenarioError(f"{origin} line {n}: expected columns a0..aD-1 (per position), or "
                            "accepted with k")
    return idx, [a[j] for j in range(len(a))]


def _csv_int(cells: list[str], i: int, col: str, origin: str, n: int, lo: int, hi: int) -> int:
    s = cells[i]
    try:
        v = float(s)
    except ValueError:
        v = math.nan
    if not math.isfinite(v) or v != int(v) or not lo <= v <= hi:
        raise ScenarioError(f"{origin} line {n}: {col}: expected an integer from {lo} to {hi}, "
                            f"got {s!r}")
    return int(v)


def _csv_row(cells: list[str], idx: dict[str, int], a_cols: list[int], origin: str, n: int,
             temperature: float | None) -> tuple[str, Key, int, int, int, int]:
    rid = cells[idx["request_id"]]
    if not rid:
        raise ScenarioError(f"{origin} line {n}: request_id: expected a value, got ''")
    text = {c: cells[idx[c]] for c in _CSV_TEXT if c in idx}
    cls = text.get("class") or "default"
    temp = temperature if temperature is not None else 0.0
    if "temperature" in idx:
        s = cells[idx["temperature"]]
        try:
            temp = float(s)
        except ValueError:
            temp = math.nan
        if not (math.isfinite(temp) and 0.0 <= temp <= 10.0):
            raise ScenarioError(f"{origin} line {n}: temperature: expected a number from 0 to "
                                f"10, got {s!r}")
    turn = _csv_int(cells, idx["turn"], "turn", origin, n, 0, 2**53) if "turn" in idx else 0
    rnd = _csv_int(cells, idx["round"], "round", origin, n, 0, 2**53) if "round" in idx else 0
    k_col = (_csv_int(cells, idx["k"], "k", origin, n, 1, MAX_K) if "k" in idx else None)
    if a_cols:
        vals: list[int | None] = []
        for j, i in enumerate(a_cols):
            s = cells[i]
            if s == "":
                vals.append(None)
            elif s in ("0", "1"):
                vals.append(int(s))
            else:
                raise ScenarioError(f"{origin} line {n}: a{j}: expected 0, 1 or blank (not "
                                    f"drafted), got {s!r}")
        drafted = next((j for j, v in enumerate(vals) if v is None), len(vals))
        late = next((j for j in range(drafted, len(vals)) if vals[j] is not None), None)
        if late is not None:
            raise ScenarioError(f"{origin} line {n}: a{late}: a value after the blank a{drafted}"
                                " (positions not drafted are the last ones)")
        k = drafted if k_col is None else k_col
        if k_col is not None:
            if k_col > drafted:
                raise ScenarioError(f"{origin} line {n}: k: {k_col}, but a{drafted} is blank")
            over = next((j for j in range(k_col, drafted) if vals[j] == 1), None)
            if over is not None:
                raise ScenarioError(f"{origin} line {n}: a{over}: 1 at a position past k={k_col}")
        if k < 1:
            raise ScenarioError(f"{origin} line {n}: a0: blank (a round drafts at least one "
                                "position)")
        acc = next((j for j in range(k) if vals[j] == 0), k)
        again = next((j for j in range(acc, k) if vals[j] == 1), None)
        if again is not None:
            raise ScenarioError(f"{origin} line {n}: a{again}: 1 after a{acc} was rejected (a "
                                "round accepts a prefix of its draft)")
        if "accepted" in idx:
            given = _csv_int(cells, idx["accepted"], "accepted", origin, n, 0, MAX_K)
            if given != acc:
                raise ScenarioError(f"{origin} line {n}: accepted: {given}, but a0..a{k - 1} "
                                    f"accept {acc}")
    else:
        assert k_col is not None
        k = k_col
        acc = _csv_int(cells, idx["accepted"], "accepted", origin, n, 0, k)
    key = Key(text.get("model", ""), text.get("drafter", ""), text.get("drafter_precision", ""),
              cls, float(temp))
    return rid, key, acc, k, turn, rnd


# ---------------------------------------------------------------- (b) vLLM counters


def read_prometheus(path: str | Path, cls: str | None = None,
                    temperature: float | None = None) -> list[Evidence]:
    """vLLM's per-position counters -> aggregate evidence (no per-request information)."""
    from .acceptance_import import parse_prometheus

    path = Path(path)
    text = safe_read.read_text(path, "an acceptance measurement", safe_read.DATA_BYTES,
                               inflate=True)
    m = parse_prometheus(text, str(path))
    if m.rates is None or m.drafts is None:
        raise ScenarioError(f"{path}: no vllm:spec_decode_num_accepted_tokens_per_pos counters:"
                            " a posterior needs accepted counts per position (a tau alone "
                            "does not say how often each position was reached)")
    counts = np.asarray(m.rates) * m.drafts  # per_pos[i] = drafts that accepted >= i + 1
    at_risk = np.concatenate([[m.drafts], counts[:-1]])
    key = Key(m.model or "", "", "", cls or "default", float(temperature or 0.0))
    notes = [*m.notes, "vLLM counters: one draft is one round; a draft shorter than k counts "
             "its missing positions as rejected"]
    return [Evidence(key, at_risk, counts.astype(float), int(round(m.drafts)), None,
                     source=f"vLLM Prometheus spec-decode counters {path.name}", notes=notes)]


# ---------------------------------------------------------------- (c) SGLang histograms


def _sglang_records(text: str, origin: str) -> list[tuple[str, Any]]:
    def loads(s: str, where: str) -> Any:
        try:
            return safe_read.json_loads(s)
        except safe_read.DuplicateKeyError as exc:
            raise ScenarioError(f"{where}: key {exc.args[0]!r} appears twice in one object"
                                ) from None
        except json.JSONDecodeError as exc:
            raise ScenarioError(f"{where}: not JSON ({exc.msg}, column {exc.colno})") from None

    if text.lstrip().startswith("["):
        try:
            data = safe_read.json_loads(text)
        except json.JSONDecodeError as exc:
            raise ScenarioError(f"{origin} line {exc.lineno}: not JSON ({exc.msg})") from None
        except safe_read.DuplicateKeyError as exc:
            raise ScenarioError(f"{origin}: key {exc.args[0]!r} appears twice in one object"
                                ) from None
        return [(f"{origin} item {i}", r) for i, r in enumerate(data)]
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            out.append((f"{origin} line {n}", loads(line, f"{origin} line {n}")))
    return out


def read_sglang(path: str | Path, cls: str | None = None,
                temperature: float | None = None) -> list[Evidence]:
    """SGLang responses with per-request accept histograms -> evidence per class."""
    path = Path(path)
    origin = str(path)
    text = safe_read.read_text(path, "SGLang responses (JSON or JSON lines)",
                               safe_read.DATA_BYTES, inflate=True)
    groups: dict[Key, list[list[Any]]] = {}
    classes: set[str] = set()
    records = _sglang_records(text, origin)
    for i, (where, rec) in enumerate(records):
        if not isinstance(rec, dict):
            raise ScenarioError(f"{where}: expected an object (a /generate response or its "
                                "meta_info)")
        meta = rec.get("meta_info", rec)
        if not isinstance(meta, dict):
            raise ScenarioError(f"{where}: meta_info: expected an object")
        name = ("spec_accept_histogram" if "spec_accept_histogram" in meta else
                "spec_correct_drafts_histogram")
        hist = meta.get(name)
        if hist is None:
            raise ScenarioError(f"{where}: no meta_info.spec_accept_histogram (SGLang returns "
                                "it per request when speculative decoding is on)")
        if (not isinstance(hist, list) or len(hist) < 2 or len(hist) > MAX_K + 1
                or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0
                           for x in hist)):
            raise ScenarioError(f"{where}: {name}: expected a list of 2 to {MAX_K + 1} "
                                f"non-negative counts (steps that accepted 0, 1, ..., k "
                                f"drafts), got {str(hist)[:60]}")
        c = rec.get("class", meta.get("class"))
        c = str(c) if c not in (None, "") else "default"
        t = rec.get("temperature", meta.get("temperature", temperature))
        t = 0.0 if t is None else t
        if isinstance(t, bool) or not isinstance(t, int | float) or not 0 <= t <= 10:
            raise ScenarioError(f"{where}: temperature: expected a number from 0 to 10, got "
                                f"{t!r}")
        rid = str(meta.get("id", rec.get("id", f"record {i}")))
        classes.add(c)
        h = np.asarray(hist, np.int64)
        if h.sum() == 0:
            continue
        key = Key("", "", "", c, float(t))
        g = groups.setdefault(key, [[], [], []])
        a = np.repeat(np.arange(len(h)), h)
        g[0].append(np.full(len(a), f"{i}:{rid}", dtype=object))
        g[1].append(a)
        g[2].append(np.full(len(a), len(h) - 1))
    if not records:
        raise ScenarioError(f"{origin}: no records")
    groups = _group_filter(groups, cls, origin, classes)
    src = f"SGLang per-request accept histograms {path.name}"
    return [from_rounds(key, np.concatenate(g[0]).astype(str), np.concatenate(g[1]),
                        np.concatenate(g[2]), src,
                        ["k per request = its histogram's length - 1"])
            for key, g in sorted(groups.items())]


# ---------------------------------------------------------------- reading any of them


def posteriors(file: str | Path, fmt: str, *, cls: str | None = None,
               temperature: float | None = None, design_effect: float | None = None,
               base_dir: Path | None = None) -> list[Posterior | PointValue]:
    """``file`` in format ``fmt`` -> one posterior (or point value) per key."""
    if fmt not in FORMATS:
        raise ScenarioError(f"--format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    if design_effect is not None and not 1.0 <= design_effect <= 1e6:
        raise ScenarioError(f"--design-effect: expected a number from 1 to 1e6, got "
                            f"{design_effect:g}")
    if fmt == "profile":
        return load_profile_beliefs(str(file), cls, base_dir)
    reader = {"csv": read_csv_rounds, "prometheus": read_prometheus,
              "sglang": read_sglang}[fmt]
    return [fit(ev, design_effect=design_effect) for ev in reader(file, cls, temperature)]


# ---------------------------------------------------------------- the profile and its sidecar


def _r(x: float) -> float:
    return float(f"{float(x):.6g}")


def sidecar_path(profile: str | Path) -> Path:
    p = Path(profile)
    stem = p.name[:-len(p.suffix)] if p.suffix in (".yaml", ".yml") else p.name
    return p.with_name(stem + SIDECAR_SUFFIX)


def _slug(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", s).strip("-") or "x"


def build_profiles(posts: list[Posterior], name: str, *, method: str | None = None,
                   k: int | None = None, sidecar: str = "", seed: int = 0,
                   draws: int = DRAWS) -> tuple[dict[str, Any], dict[str, Any]]:
    """(profiles, sidecar): one profile per (model, drafter, precision, temperature), a class
    entry per class holding the posterior-mean alphas; the sidecar holds the counts."""
    by: dict[tuple[str, str, str, float], list[Posterior]] = {}
    for p in posts:
        by.setdefault((p.key.model, p.key.drafter, p.key.precision, p.key.temperature),
                      []).append(p)
    varies = [len({g[i] for g in by}) > 1 for i in range(4)]
    today = _dt.date.today().isoformat()
    profiles: dict[str, Any] = {}
    side: dict[str, Any] = {}
    for (model, drafter, prec, temp), group in sorted(by.items()):
        pname = name
        extra = [_slug(v) for v, vary in zip((model, drafter, prec), varies[:3], strict=True)
                 if vary and v]
        if varies[3]:
            extra.append(f"t{temp:g}")
        if extra:
            pname = "-".join([name, *extra])
        entry: dict[str, Any] = {}
        if method:
            entry["method"] = method
        if model:
            entry["target"] = model
        if drafter:
            entry["drafter"] = drafter
        entry["temperature"] = temp
        srcs = sorted({p.source for p in group if p.source})
        entry["source"] = (f"posterior mean of measured per-round acceptance, "
                           f"{'; '.join(srcs)} (imported {today})")
        note = f"the posterior (counts, prior, heterogeneity) is in {sidecar}" if sidecar \
            else "posterior not kept"
        if prec:
            note += f"; drafter weights {prec}"
        entry["notes"] = note
        entry["classes"] = {}
        side[pname] = {}
        for p in group:
            kk = k or p.k
            p10, p50, p90 = p.tau_band(kk, draws, seed)
            het = p.heterogeneity
            bits = [f"{p.rounds} rounds" + (f" of {p.requests} requests" if p.requests else
                                              " (aggregate counters)"),
                    f"posterior mean tau {p.tau_mean(kk):.4f} at k={kk} (P10 {p10:.3f}, P90 "
                    f"{p90:.3f})",
                    f"effective rounds {p.effective_rounds:.0f} (design effect "
                    f"{p.design_effect[0]:.2f})"]
            if het is not None and het.concentration is not None:
                bits.append(f"{het.text()}; to simulate the spread: per_request: "
                            f"{{distribution: beta, concentration: {het.concentration:.3g}}}")
            entry["classes"][p.key.cls] = {
                "alpha_by_position": [_r(a) for a in p.mean_alphas()], "at_k": p.k,
                "notes": "; ".join(bits)}
            side[pname][p.key.cls] = p.to_dict(kk, seed, draws)
        profiles[pname] = entry
    return profiles, side


def write_profile(posts: list[Posterior], out: str | Path, *, name: str | None = None,
                  method: str | None = None, k: int | None = None, force: bool = False,
                  seed: int = 0, draws: int = DRAWS, command: str = "") -> dict[str, Any]:
    """Write the profile YAML (posterior means) and its sidecar ``*.posterior.yaml``; both
    checked before either is written, each atomic, the sidecar removed if the profile fails.
    Returns {profiles, sidecar, path}."""
    import yaml

    from specsim.outputs import check_file, write_file

    out = Path(out)
    side_path = sidecar_path(out)
    check_file(out, force, "--out")
    check_file(side_path, force, "--out (its sidecar)")
    name = name or out.stem
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ScenarioError(f"--name: expected letters, digits, '.', '_' or '-', got {name!r}")
    if any(not isinstance(p, Posterior) for p in posts):
        raise ScenarioError("--out: a profile is written from measurements (csv, prometheus, "
                            "sglang), not from another profile")
    profiles, side = build_profiles(posts, name, method=method, k=k, sidecar=side_path.name,
                                    seed=seed, draws=draws)
    for pname, entry in profiles.items():
        parse_profile(pname, entry, f"posterior profile {pname}")  # what a scenario loads
    today = _dt.date.today().isoformat()
    head = (f"# acceptance profile written by `specsim acceptance posterior{command}` on "
            f"{today}: posterior means\n# use: speculation: {{acceptance: {{profile: "
            f"{out.name}{'' if len(profiles) == 1 else '#NAME'}}}}}; the posterior is in "
            f"{side_path.name}\n")
    text = head + yaml.safe_dump(profiles, sort_keys=False, width=100, default_flow_style=None)
    side_doc = {"profile": out.name, "written": today, "prior": {
        "distribution": "beta", "a": PRIOR[0], "b": PRIOR[1],
        "of": "each conditional alpha_j = P(accept j | accepted 1..j-1)"},
        "profiles": side}
    side_text = (f"# posterior of {out.name} (specsim acceptance posterior); read back with "
                 f"`specsim acceptance posterior {out.name} --format profile`\n"
                 + yaml.safe_dump(side_doc, sort_keys=False, width=100,
                                  default_flow_style=None))
    existed = side_path.exists()
    write_file(side_path, side_text, force, "--out (its sidecar)")
    try:
        write_file(out, text, force, "--out")
    except BaseException:
        if not existed:
            side_path.unlink(missing_ok=True)
        raise
    return {"profiles": profiles, "sidecar": str(side_path), "path": str(out)}


def _side_posterior(pname: str, cls: str, d: Any, where: str) -> Posterior:
    """A Posterior rebuilt from a sidecar's class entry (counts, design effects, fit)."""
    if not isinstance(d, dict):
        raise ScenarioError(f"{where}: expected a mapping")
    try:
        n = np.asarray(d["at_risk"], float)
        s = np.asarray(d["accepted"], float)
        de = np.asarray(d["design_effect"], float)
        key = d.get("key") or {}
        prior = d.get("prior") or {}
        het = d.get("heterogeneity")
        h = None if het is None else Heterogeneity(float(het["mean_alpha"]), None if het.get(
            "concentration") is None else float(het["concentration"]), int(het["requests"]))
        ok = (n.ndim == s.ndim == de.ndim == 1 and len(n) == len(s) == len(de) >= 1
              and np.all(np.isfinite(n)) and np.all(s >= 0) and np.all(s <= n)
              and np.all(de >= 1))
    except (KeyError, TypeError, ValueError):
        ok = False
    if not ok:
        raise ScenarioError(f"{where}: expected at_risk, accepted and design_effect lists of "
                            "one length (0 <= accepted <= at_risk, design effects >= 1), as "
                            "`specsim acceptance posterior --out` writes them")
    k = Key(str(key.get("model") or ""), str(key.get("drafter") or ""),
            str(key.get("drafter_precision") or ""), cls, float(key.get("temperature") or 0.0))
    return Posterior(k, n, s, de, int(d.get("rounds") or n[0]), d.get("requests"), h,
                     (float(prior.get("a", PRIOR[0])), float(prior.get("b", PRIOR[1]))),
                     bool(d.get("design_effect_given")), str(d.get("source", "")),
                     [f"read from the sidecar of profile {pname}"])


def load_profile_beliefs(ref: str, cls: str | None = None,
                         base_dir: Path | None = None) -> list[Posterior | PointValue]:
    """A bundled profile's name or a profile file (``path.yaml[#name]``): each class's
    posterior from the sidecar where there is one, else its point value, marked so."""
    from specsim import yamlio

    from .acceptance import _is_path, load_profile_file, profile_catalog

    side: dict[str, Any] = {}
    if _is_path(ref):
        names = [ref.partition("#")[2]] if "#" in ref else None
        path = Path(ref.partition("#")[0])
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        if names is None:
            cat = yamlio.load_file(path, "a YAML acceptance profile", origin=str(path)) \
                if path.is_file() else None
            names = sorted(map(str, cat)) if isinstance(cat, dict) else [""]
        entries = []
        for nm in names:
            pick = f"{path}#{nm}" if nm else str(path)
            entries.append(load_profile_file(pick, None, "--format profile"))
        sp = sidecar_path(path)
        if sp.is_file():
            doc = yamlio.load_file(sp, "a posterior sidecar", origin=str(sp))
            side = (doc or {}).get("profiles") or {} if isinstance(doc, dict) else {}
            if not isinstance(side, dict):
                raise ScenarioError(f"{sp}: profiles: expected a mapping")
    else:
        cat = profile_catalog()
        if ref not in cat:
            raise ScenarioError(f"--format profile: unknown acceptance profile {ref!r} (bundled:"
                                f" {', '.join(sorted(cat))}; or a YAML path)")
        entries = [(ref, cat[ref])]
    out: list[Posterior | PointValue] = []
    for pname, entry in entries:
        classes, default = parse_profile(pname, entry, f"acceptance profile {pname}")
        if default is not None:
            classes = {**classes, "default": default}
        temp = float(entry.get("temperature", 0.0) or 0.0)
        for c, acc in classes.items():
            if cls is not None and c != cls:
                continue
            sd = (side.get(pname) or {}).get(c) if isinstance(side.get(pname), dict) else None
            if sd is not None:
                out.append(_side_posterior(pname, c, sd, f"{sidecar_path(ref.partition('#')[0])}"
                                                         f": profiles.{pname}.{c}"))
            else:
                key = Key(str(entry.get("target") or ""), str(entry.get("drafter") or ""), "",
                          c, temp)
                out.append(PointValue(key, acc, pname, notes=[
                    f"{POINT}: {acc.summary}" + (f" ({acc.source})" if acc.source else "")]))
    if not out:
        raise ScenarioError(f"--class: profile {ref} has no class {cls!r}")
    return out


# ---------------------------------------------------------------- text


def describe(b: Posterior | PointValue, k: int | None = None, seed: int = 0,
             draws: int = DRAWS) -> list[str]:
    """The lines `acceptance posterior` prints for one key."""
    kk = k or b.k
    if isinstance(b, PointValue):
        return [f"{b.key.label()}: {POINT} (profile {b.profile})",
                f"  {b.acc.derivation(kk)[0]}; tau {b.tau_mean(kk):.3f} at k={kk}",
                *([f"  source: {b.acc.source}"] if b.acc.source else [])]
    p10, p50, p90 = b.tau_band(kk, draws, seed)
    who = f"{b.requests:,} requests" if b.requests else "aggregate counters"
    lines = [f"{b.key.label()}: {b.rounds:,} rounds, {who}",
             "  per-position alpha (posterior mean): "
             + " ".join(f"{a:.3f}" for a in b.mean_alphas()),
             f"  tau at k={kk}: {b.tau_mean(kk):.3f} (P10 {p10:.3f}, P50 {p50:.3f}, "
             f"P90 {p90:.3f})" + (" derived past the measured k" if kk > b.k else "")]
    if b.heterogeneity is not None:
        lines.append(f"  heterogeneity: {b.heterogeneity.text()}")
    lines.append(f"  effective rounds {b.effective_rounds:,.0f} of {b.rounds:,} (design effect "
                 f"{b.design_effect[0]:.2f} at position 1, {b.design_effect.max():.2f} at most)")
    lines += [f"  note: {n}" for n in b.notes]
    return lines
