"""The vendor library's attention backward (torch's SDPA backward: FlashAttention-2, cuDNN
or the memory-efficient kernel on a GPU, torch's CPU kernel on the emulator), a host call
with no kernel; offer-paths offers it as the `sdpa` path of an attention's gradients.
Its key is the attention's."""

from __future__ import annotations

from collections.abc import Mapping

from xdsl.ir import Operation

from emmy.base.device_records import BufferArg, VendorAttentionBackward
from emmy.base.errors import EmmyError
from emmy.base.problem_key import ProblemKey
from emmy.dialects import graph
from emmy.dsl.keys import problem_key
from emmy.dsl.library import declaration
from emmy.families import attention, attention_dkv, attention_dq, attention_stats
from emmy.families.family import Fusion, HostCallFamily, OpSites, Site
from emmy.families.vendor_attention import sdpa_shapes

NAME = "vendor_attention_backward"


def site(op: Operation, fusion: Fusion) -> Site:
    """The host call of the library's gradients on q, k, v, dO[, mask]; emmy's own are the
    parts offer-paths offers beside it (graph.attention_backward)."""
    assert isinstance(op, graph.AttentionGradientsOp)
    if op.library is None:
        raise EmmyError(
            "graph.attention_gradients has no kernel of its own: offer-paths makes it a "
            "choice between its parts (graph.attention_backward) and the library's"
        )
    scale, causal = float(op.scale.value.data), op.causal is not None
    key = attention.problem_of(op.q, op.k, op.mask, scale, causal)
    mask = [op.mask] if op.mask is not None else []
    return Site(NAME, key, [op.q, op.k, op.v, op.grad, *mask])


def host_key(key: dict) -> ProblemKey:
    """The key text of emmy's backward kernels' declarations (attention_dq.emmy's): one key
    for them and the library."""
    return problem_key(declaration("attention_dq"), key)


def reference(key: dict, inputs: list):
    """(dq, dk, dv) of inputs q, k, v, dO[, mask] in SDPA's [groups, heads, len, d] views."""
    q, k, v, grad, *mask = inputs
    flat = [t.reshape(-1, *t.shape[-2:]) for t in (q, k, v, grad)]
    if mask:
        mask = [mask[0].reshape(int(key["batch"]), -1, int(key["kv_len"]))]
    q_flat, k_flat, v_flat, grad_flat = flat
    out = attention.reference(key, [q_flat, k_flat, v_flat, *mask])
    stats = attention_stats.reference(key, [q_flat, k_flat, out, grad_flat, *mask])
    grad_q = attention_dq.reference(key, [*flat, stats, *mask])
    grad_k = attention_dkv.reference(key | {"part": "dk"}, [*flat, stats, *mask])
    grad_v = attention_dkv.reference(
        key | {"part": "dv"}, [q_flat, k_flat, grad_flat, stats, *mask]
    )
    return grad_q.reshape(q.shape), grad_k.reshape(k.shape), grad_v.reshape(v.shape)


def host_call(key: Mapping[str, int | str], args: tuple[BufferArg, ...]) -> VendorAttentionBackward:
    """SDPA's backward at an attention's key on buffers q, k, v, dO, [mask], dq, dk, dv."""
    q, k, v, *mask = sdpa_shapes(key)
    shapes = (q, k, v, q, *mask, q, k, v)
    causal, scale = key["causal"] == "yes", float(key["scale"])
    return VendorAttentionBackward(args, shapes, str(key["T"]), causal, scale)


FAMILY = HostCallFamily(
    NAME,
    lowers=OpSites((graph.AttentionGradientsOp,), site),
    reference=reference,
    extra_atol=attention_stats.rounded_atol,
    host_key=host_key,
    host_call=host_call,
    runs_by="torch's scaled_dot_product_attention backward (FlashAttention-2, cuDNN or "
    "efficient on a GPU, torch's CPU kernel on emu)",
)
