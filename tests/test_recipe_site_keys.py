"""The key texts of every recipe's sites are pinned in tests/data/recipe-site-keys.json:
recorded database rows are stored under those texts, so a change to any code that writes
key text would orphan them. Where a change of the keys is meant, regenerate the file with

    .venv/bin/python tests/test_recipe_site_keys.py

and say in the commit which keys changed and what becomes of the rows recorded under them.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from emmy.build import recipe_program
from emmy.frontend.recipes import resolve_case

DATA = Path(__file__).parent / "data" / "recipe-site-keys.json"
REGENERATE = "regenerate it with `.venv/bin/python tests/test_recipe_site_keys.py`"
RECIPES = ("mlp", "gpt2", "llama")
#: each recipe at its tiny config and its default (None), size 0
CONFIGS = ("tiny", None)
TARGETS = ("nvidia-h200-sm90", "emu")


def cases() -> list[tuple[str, str | None, str]]:
    return [(r, c, t) for r in RECIPES for c in CONFIGS for t in TARGETS]


def case_name(recipe: str, config: str | None, target: str) -> str:
    return f"{recipe}:{resolve_case(recipe, config, 0, None).config_name}:{target}"


def site_keys(recipe: str, config: str | None, target: str) -> list[list[str]]:
    """The sorted (family, key text) of the compile's sites: its kernels, its host calls,
    and its host-level choices with every option's kernels."""
    program = recipe_program(recipe, config, 0, target)
    sites = {k.site for k in program.kernels.values()} | set(program.host_calls.values())
    for choice in program.choices.values():
        sites.add(choice.site)
        for option in choice.paths.values():
            sites |= {step.site for step in option}
    return sorted([site.family, str(site.key)] for site in sites)


def dumps(pinned: dict[str, list[list[str]]]) -> str:
    """One site a line, so that a diff of the file shows which keys changed."""
    cases = [
        f"  {json.dumps(name)}: [\n" + ",\n".join(f"    {json.dumps(s)}" for s in sites) + "\n  ]"
        for name, sites in pinned.items()
    ]
    return "{\n" + ",\n".join(cases) + "\n}\n"


@pytest.mark.parametrize("recipe, config, target", cases())
def test_recipe_site_keys_are_the_pinned_texts(recipe: str, config: str | None, target: str):
    name = case_name(recipe, config, target)
    pinned = json.loads(DATA.read_text()).get(name)
    assert pinned is not None, f"{DATA.name} has no case {name}; {REGENERATE}"
    made = site_keys(recipe, config, target)
    gone = [site for site in pinned if site not in made]
    new = [site for site in made if site not in pinned]
    assert not gone and not new, (
        f"{name}: the site keys differ from {DATA.name} (recorded rows are keyed by them); "
        f"no longer made: {gone[:3]}, new: {new[:3]}. If the change is meant, {REGENERATE}"
    )


def main() -> int:
    # the environment the tests compile in (tests/conftest.py): no committed prior
    os.environ.setdefault("EMMY_CACHE_DIR", tempfile.mkdtemp(prefix="emmy-site-keys-"))
    os.environ["EMMY_PRIOR_DIR"] = tempfile.mkdtemp(prefix="emmy-no-prior-")
    pinned = {case_name(*case): site_keys(*case) for case in cases()}
    DATA.parent.mkdir(exist_ok=True)
    DATA.write_text(dumps(pinned))
    print(f"wrote {sum(map(len, pinned.values()))} site keys of {len(pinned)} cases to {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
