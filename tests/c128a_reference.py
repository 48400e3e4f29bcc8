"""vLLM 0.33.0's C128A top-k metadata as patch 0001 defines it, in torch.

Shared by the CPU interpreter suite and the GPU test, so the two check one
contract: the unguarded computation wherever the ids are in range; a request
id outside the block table gives slots -1 and length 0; a block id outside
the KV cache gives slot -1 inside the length, which counts the readable
columns (inside the table); a padding token (slot mapping < 0) has length 0.
"""

from __future__ import annotations

from typing import Any


def c128a_reference(
    positions: Any,
    num_decode_tokens: int,
    req_ids: Any,
    block_table: Any,
    block_size: int,
    num_kv_blocks: int,
    slot_mapping: Any,
    width: int,
    compress_ratio: int = 128,
) -> tuple[Any, Any, Any]:
    """(decode slots ``[d, width]``, decode lengths ``[d]``, prefill local
    indices ``[p, width]``) for ``d = num_decode_tokens`` decode tokens
    followed by ``p`` prefill tokens."""
    import torch

    d = num_decode_tokens
    device = positions.device
    n = torch.div(positions + 1, compress_ratio, rounding_mode="floor").clamp(min=0, max=width)
    j = torch.arange(width, device=device)
    rows, table_width = block_table.shape
    req = req_ids[:d].long()
    col = j // block_size
    readable = (j[None] < n[:d, None]) & ((req >= 0) & (req < rows))[:, None]
    readable &= (col < table_width)[None]
    if rows:
        blocks = block_table[req.clamp(0, rows - 1)][:, col.clamp(max=table_width - 1)].long()
    else:
        blocks = torch.full((d, width), -1, dtype=torch.long, device=device)
    valid = readable & (blocks >= 0) & (blocks < num_kv_blocks)
    decode = torch.where(valid, blocks * block_size + (j % block_size)[None], -1)
    lens = torch.where(slot_mapping[:d] >= 0, readable.sum(1), 0)
    prefill = torch.where(j[None] < n[d:, None], j[None], -1)
    return decode.to(torch.int32), lens.to(torch.int32), prefill.to(torch.int32)
