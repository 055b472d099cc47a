"""Every family the compiler knows, by name: lowering, the bench, the checks, golden files,
the dataset and the prior read them here. A family of a user's library (EMMY_LIBRARY_PATH)
with no entry here is still compiled and benched, but not checked."""

from __future__ import annotations

from xdsl.ir import Operation

from emmy.dsl.library import families
from emmy.errors import EmmyError
from emmy.families import (
    arg_rows,
    attention,
    attention_backward_path,
    attention_decode,
    attention_decode_combine,
    attention_decode_path,
    attention_dkv,
    attention_dkv_tc,
    attention_dq,
    attention_dq_tc,
    attention_path,
    attention_stats,
    attention_tc,
    batch_norm_stats,
    cat,
    conv,
    conv_path,
    conv_tc,
    conv_weight,
    conv_weight_path,
    cumsum,
    elementwise,
    embedding,
    embedding_backward,
    gather,
    grouped_matmul,
    index_copy,
    layer_norm,
    layer_norm_backward,
    mask_bias,
    matmul,
    matmul_path,
    matmul_tc,
    permute,
    pool2d,
    pool2d_backward,
    reduce_cols,
    reduce_rows,
    reduce_rows_int,
    resize2d,
    resize2d_backward,
    rms_norm,
    rms_norm_backward,
    rope,
    softmax,
    softmax_backward,
    split_sum,
    transpose,
    vendor_attention,
    vendor_attention_backward,
    vendor_conv,
    vendor_conv_weight,
    vendor_matmul,
)
from emmy.families.family import Family, FamilyKind, Fuses

FAMILIES: dict[str, Family] = {
    module.FAMILY.name: module.FAMILY
    for module in (
        softmax,
        softmax_backward,
        layer_norm,
        layer_norm_backward,
        batch_norm_stats,
        rms_norm,
        rms_norm_backward,
        elementwise,
        reduce_rows,
        reduce_cols,
        reduce_rows_int,
        arg_rows,
        cumsum,
        transpose,
        permute,
        gather,
        pool2d,
        pool2d_backward,
        resize2d,
        resize2d_backward,
        cat,
        index_copy,
        embedding,
        embedding_backward,
        rope,
        mask_bias,
        matmul,
        matmul_tc,
        conv,
        conv_tc,
        conv_weight,
        grouped_matmul,
        split_sum,
        attention_stats,
        attention_dq,
        attention_dq_tc,
        attention_dkv,
        attention_dkv_tc,
        # last of the tensor-core families: gpu-day --quick checks the last alone
        attention,
        attention_tc,
        attention_decode,
        attention_decode_combine,
        attention_path,
        attention_backward_path,
        attention_decode_path,
        matmul_path,
        conv_path,
        conv_weight_path,
        vendor_matmul,
        vendor_conv,
        vendor_conv_weight,
        vendor_attention,
        vendor_attention_backward,
    )
}


def registered(name: str) -> Family:
    entry = FAMILIES.get(name)
    if entry is None:
        raise EmmyError(f"family {name!r} has no registry entry (emmy/families/)")
    return entry


def of_kind(kind: FamilyKind) -> dict[str, Family]:
    return {name: entry for name, entry in FAMILIES.items() if entry.kind == kind}


def implementing(op: Operation) -> Family | None:
    """The family whose sites stand for this graph op."""
    return next((entry for entry in FAMILIES.values() if isinstance(op, entry.ops)), None)


def fusing(fuses: Fuses) -> tuple[type[Operation], ...]:
    """The graph ops whose kernels take these chains."""
    return tuple(op for entry in FAMILIES.values() if entry.fuses == fuses for op in entry.ops)


def choice_forks() -> dict[str, dict[str, list[str]]]:
    """Per host-level choice family: its forks and their options."""
    return {
        name: {fork: list(options) for fork, options in entry.forks.items()}
        for name, entry in of_kind(FamilyKind.CHOICE).items()
    }


def missing_parts(entry: Family) -> list[str]:
    """What the entry lacks for its kind: a kernel family its `.emmy` declaration, its
    reference and its check keys and inputs; a choice its forks; a host call its reference
    and its host call."""
    missing = []
    if entry.kind == FamilyKind.KERNEL:
        if entry.name not in families():
            missing.append(f"a kernel {entry.name} in emmy/library/")
        if entry.check_keys is None or entry.check_inputs is None:
            missing.append("check keys and inputs")
    if entry.kind in (FamilyKind.KERNEL, FamilyKind.HOST_CALL) and entry.reference is None:
        missing.append("a reference")
    if entry.kind == FamilyKind.HOST_CALL and entry.host_call is None:
        missing.append("its host call")
    if entry.kind == FamilyKind.CHOICE and not entry.forks:
        missing.append("its forks and options")
    if entry.ops and entry.site is None:
        missing.append("a site builder for its ops")
    return missing
