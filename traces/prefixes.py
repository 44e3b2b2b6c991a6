"""Prefix block ids for synthetic requests, in Mooncake's ``hash_ids`` convention.

A prompt of P tokens has ceil(P / 512) blocks. A full block has an id that any other
prompt starting with the same tokens shares; a trailing partial block gets an id of its
own (its contents differ as soon as the text grows). Requests share a common system
prompt (the first ``shared_tokens``) and, within a session, each turn's prompt is the
previous turn's prompt + answer + a new message, so its ids extend the previous turn's.
"""

from __future__ import annotations

import numpy as np

from specsim.traces.schema import BLOCK_TOKENS, blocks_column


def prefix_blocks(
    prompt_tokens: np.ndarray, stream_id: np.ndarray, shared_tokens: int
) -> np.ndarray:
    """Block-id tuples for each request.

    ``stream_id`` groups requests whose prompts are prefixes of one token stream (one
    session); -1 means a stream of its own. Blocks wholly inside the first
    ``shared_tokens`` are common to everyone.
    """
    n = len(prompt_tokens)
    prompt = np.asarray(prompt_tokens, dtype=np.int64)
    full = prompt // BLOCK_TOKENS
    partial = (prompt % BLOCK_TOKENS) > 0
    shared = shared_tokens // BLOCK_TOKENS
    streams = np.asarray(stream_id, dtype=np.int64).copy()
    alone = streams < 0
    top = streams.max(initial=-1) + 1
    streams[alone] = top + np.arange(int(alone.sum()))
    # Each stream owns ids for its own full blocks beyond the shared ones.
    codes, inverse = np.unique(streams, return_inverse=True)
    own = np.zeros(len(codes), dtype=np.int64)
    np.maximum.at(own, inverse, np.maximum(full - shared, 0))
    base = shared + np.concatenate([[0], np.cumsum(own)[:-1]])
    next_partial = shared + int(own.sum())
    partial_ids = next_partial + np.cumsum(partial) - 1
    req_base = base[inverse]

    def rows():
        for i in range(n):
            f = int(full[i])
            ids = list(range(min(f, shared)))
            if f > shared:
                b = int(req_base[i])
                ids.extend(range(b, b + f - shared))
            if partial[i]:
                ids.append(int(partial_ids[i]))
            yield tuple(ids)

    return blocks_column(rows(), n)
