"""The host-level choice of an attention's gradients' path: emmy's kernels (attention_stats,
attention_dq, attention_dkv) or the vendor library's backward (offer-paths builds its
sites and options)."""

from __future__ import annotations

from emmy.families.family import ChoiceFamily

NAME = "attention_backward_path"
KNOB = "path"
PATHS = ("fused", "sdpa")

FAMILY = ChoiceFamily(
    NAME,
    forks={KNOB: PATHS},
    # torch's SDPA backward until golden files, rows or the prior say emmy's kernels win
    target_defaults={"gpu": {KNOB: "sdpa"}},
)
