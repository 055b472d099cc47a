"""Campaign files, plans, the merged output and the command line, without Ray's cluster
(tests/test_campaign_ray.py runs campaigns on a local Ray)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from stores import SOFTMAX_DEFAULT, SOFTMAX_KEY, row

from emmy.base.errors import EmmyError
from emmy.campaign.items import load_campaign
from emmy.campaign.output import CampaignOutput
from emmy.campaign.planner import grid_sources, parse_configs, plan
from emmy.cli import main
from emmy.dataset.dataset_store import read_freeze, row_cell
from emmy.families.family import KernelFamily
from emmy.families.registry import of_kind
from emmy.frontend.cache import traced_graph_text
from emmy.measure.bench import BenchOptions, requested_configs

SOFTMAX = "torch.softmax(torch.randn(8, 64), -1)"
ATTENTION = (
    "torch.nn.functional.scaled_dot_product_attention(torch.randn(1, 2, 16, 32), "
    "torch.randn(1, 2, 16, 32), torch.randn(1, 2, 16, 32))"
)


def write_campaign(path: Path, items: list, **top) -> Path:
    path.write_text(
        json.dumps({"format": "emmy-campaign", "schema": 1, "items": items, **top}, indent=1)
    )
    return path


def softmax_item(**fields) -> dict:
    buffers = {"inputs": [[[8, 64], "f32"]], "outputs": [[[8, 64], "f32"]]}
    return {"family": "softmax", "key": SOFTMAX_KEY, "configs": {"sample": 2}, **buffers, **fields}


def test_an_item_asks_for_the_configs_a_bench_would(tmp_path) -> None:
    campaign = load_campaign(write_campaign(tmp_path / "c.json", [softmax_item()]))
    (item,) = campaign.items
    assert item.devices == ("emu",)
    # the configs a bench with --sample 2 asks for, the declared default first
    wanted = requested_configs(item.work(), BenchOptions(sample=2, max_rows=2))
    assert item.wanted_configs() == wanted and wanted[0] == SOFTMAX_DEFAULT
    assert campaign.output == tmp_path / "c.out"


def test_an_item_without_buffers_takes_those_its_family_declares(tmp_path) -> None:
    key = "bh=2,kv_bh=2,q_len=16,kv_len=24,d=32,T=bf16,causal=no,scale=0.125"
    item = {"family": "attention", "key": key, "configs": "default"}
    (attention,) = load_campaign(write_campaign(tmp_path / "c.json", [item])).items
    assert [(s.shape, s.dtype) for s in attention.inputs] == [
        ((2, 16, 32), "bf16"), ((2, 24, 32), "bf16"), ((2, 24, 32), "bf16"),
    ]  # fmt: skip
    assert [(s.shape, s.dtype) for s in attention.outputs] == [((2, 16, 32), "bf16")]
    chained = {k: v for k, v in softmax_item().items() if k not in ("inputs", "outputs")}
    with pytest.raises(EmmyError, match="item 0 .softmax.: softmax reads a chain's inputs"):
        load_campaign(write_campaign(tmp_path / "c.json", [chained]))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{", "c.json:1:2: invalid JSON"),
        (json.dumps({"format": "other", "schema": 1, "items": []}), "not an emmy campaign"),
        (json.dumps({"format": "emmy-campaign", "schema": 7, "items": []}), "schema 7"),
        (
            json.dumps({"format": "emmy-campaign", "schema": 1, "items": [], "colour": 1}),
            "unknown field 'colour'",
        ),
    ],
)
def test_a_malformed_file_is_one_line_naming_it(tmp_path, text: str, says: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(text)
    with pytest.raises(EmmyError) as error:
        load_campaign(path)
    message = str(error.value)
    assert says in message and str(path) in message and "\n" not in message


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ({"family": "softmax", "configs": "all"}, "item 1: missing field 'key'"),
        (softmax_item(family="softmaxx"), "item 1 (softmaxx): unknown family 'softmaxx'"),
        (softmax_item(configs="most"), 'item 1 (softmax): configs "most" is not one of'),
        (softmax_item(configs={"sample": 0}), "configs sample must be a count of 1 or more"),
        (softmax_item(configs={"sweep": ["colour"]}), "no fork named 'colour'"),
        (softmax_item(configs=[{"threads": 3}]), "is not a valid config here"),
        (softmax_item(devices=["H200"]), "'H200' is not a device identity"),
        ({**softmax_item(), "outputs": None} | {}, "outputs must be a list"),
        ({k: v for k, v in softmax_item().items() if k != "outputs"}, "give both inputs and"),
        (
            softmax_item(inputs=[[[8, "x"], "f32"]], outputs=[[[8, 64], "f32"]]),
            "inputs[0]: expected [shape, dtype]",
        ),
        (softmax_item(speed="fast"), "unknown field 'speed'"),
        (
            {"family": "attention_path", "key": "bh=1", "configs": "all"},
            "a host-level choice needs its paths",
        ),
        (softmax_item(key="rows=8,,cols"), "item 1 (softmax): malformed problem key"),
    ],
)
def test_a_malformed_item_is_one_line_naming_the_file_and_the_entry(
    tmp_path, item: dict, says: str
) -> None:
    path = write_campaign(tmp_path / "c.json", [softmax_item(), item])
    with pytest.raises(EmmyError) as error:
        load_campaign(path)
    message = str(error.value)
    assert says in message, message
    assert message.startswith(f"{path}: item 1") and "\n" not in message


def test_campaign_run_of_a_malformed_file_is_one_line(tmp_path, capsys) -> None:
    path = write_campaign(tmp_path / "c.json", [softmax_item(configs="most")])
    assert main(["campaign", "run", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"emmy: error: {path}: item 0 (softmax)") and "\n" not in err


def test_configs_on_the_command_line() -> None:
    assert parse_configs("sample=12") == {"sample": 12}
    assert parse_configs("sweep=vec,threads") == {"sweep": ["vec", "threads"]}
    assert parse_configs("all") == "all"
    with pytest.raises(EmmyError, match="expected default, all, sample=N"):
        parse_configs("sample=0")


def test_a_plan_names_each_site_once_with_every_device_kind_it_was_found_on(tmp_path) -> None:
    source = (traced_graph_text(ATTENTION), (), "<attention>", "", ATTENTION)
    campaign = plan(
        tmp_path / "c.json",
        [source],
        ["emu", "nvidia-h200-sm90"],
        configs={"sweep": ["path", "lanes"]},
        progress=lambda _: None,
    )
    campaign.write()
    again = load_campaign(tmp_path / "c.json")
    assert again.to_json() == campaign.to_json()
    by_family = {item.site.family: item for item in again.items}
    assert set(by_family) == {"attention", "attention_path"}
    # the same kernel site and choice on both kinds (no target default in a plan's compile)
    assert by_family["attention"].devices == ("emu", "nvidia-h200-sm90")
    assert by_family["attention"].configs == {"sweep": ["lanes"]}
    choice = by_family["attention_path"]
    assert choice.configs == {"sweep": ["path"]}
    assert {c["path"] for c in choice.wanted_configs()} == {"fused", "unfused", "sdpa"}
    lanes = {c["lanes"] for c in by_family["attention"].wanted_configs()}
    assert len(lanes) > 1


def test_each_group_of_the_key_grid_plans_sites_of_the_family_declaring_it(tmp_path) -> None:
    """A family's share of the dataset's grid (KernelFamily.grid) compiles to its own sites."""
    kernels = of_kind(KernelFamily).items()
    declared = {entry.grid_group or name: name for name, entry in kernels if entry.grid}
    assert "split_k" in declared and "matmul_tc" in declared
    for group, name in declared.items():
        first = grid_sources([group], every=10_000)
        campaign = plan(
            tmp_path / f"{group}.json", first, ["nvidia-h200-sm90"], progress=lambda _: None
        )
        assert name in {item.site.family for item in campaign.items}, f"{group}: {first[0][-1]}"


def test_status_says_what_is_left(tmp_path, capsys) -> None:
    path = write_campaign(tmp_path / "c.json", [softmax_item(devices=["emu", "nvidia-h200-sm90"])])
    campaign = load_campaign(path)
    (item,) = campaign.items
    cells = campaign.cells(item, "emu")
    output = CampaignOutput(campaign.output, str(path))
    output.add([row(config, 1e-3) for _, config in cells[:2]])
    output.add([row(cells[2][1], None, status="launch_error")])
    output.flush()
    assert main(["campaign", "status", str(path)]) == 0
    out = capsys.readouterr().out
    assert "emu: 3/3 cells done (1 failed), 0 left" in out
    assert "nvidia-h200-sm90: 0/3 cells done (0 failed), 3 left" in out
    assert "1 item(s) with cells left" in out


def test_the_output_keeps_one_row_a_cell_and_survives_a_write_cut_short(tmp_path) -> None:
    folder = tmp_path / "out"
    output = CampaignOutput(folder, "c.json")
    first = row(SOFTMAX_DEFAULT, 1e-3)
    assert output.add([first, row(SOFTMAX_DEFAULT, 2e-3)]) == 1  # one cell, the first kept
    old = output.flush()
    other = row({**SOFTMAX_DEFAULT, "vec": 2}, 3e-3)
    output.add([other])
    new = output.flush()
    assert [p.name for p in folder.iterdir()] == [new.name] and old != new
    # a driver killed between writing the new freeze and removing the old leaves both
    old.write_bytes(b"")
    old.unlink()
    stale = CampaignOutput(tmp_path / "stale", "c.json")
    stale.add([first])
    (folder / stale.flush().name).write_bytes(stale.flush().read_bytes())
    reread = CampaignOutput(folder, "c.json")
    assert set(reread.rows) == {row_cell(first), row_cell(other)}
    assert sorted(r.median_s for r in read_freeze(new)) == [1e-3, 3e-3]
    # a forced run replaces each cell once, with the first row it measured
    assert reread.add([row(SOFTMAX_DEFAULT, 5e-3), row(SOFTMAX_DEFAULT, 6e-3)], replace=True) == 1
    assert reread.rows[row_cell(first)].median_s == 5e-3


def test_db_import_takes_a_campaign_output(tmp_path, capsys) -> None:
    output = CampaignOutput(tmp_path / "out", "c.json")
    output.add([row(SOFTMAX_DEFAULT, 1e-3), row({**SOFTMAX_DEFAULT, "vec": 2}, 2e-3)])
    output.flush()
    dataset = tmp_path / "dataset.db"
    assert main(["db", "import", str(tmp_path / "out"), "--db", str(dataset)]) == 0
    assert "2 new rows from 1 source(s)" in capsys.readouterr().out


def test_without_ray_campaign_run_says_how_to_install_it(tmp_path) -> None:
    path = write_campaign(tmp_path / "c.json", [softmax_item()])
    script = (
        "import sys; sys.modules['ray'] = None\n"
        "from emmy.cli import main\n"
        f"sys.exit(main(['campaign', 'run', {str(path)!r}]))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "emmy: error: emmy campaign run needs Ray and rich: pip install 'emmy[campaign]'"
    )


def test_compiling_never_imports_ray() -> None:
    script = (
        "import sys\n"
        "from emmy.cli import main\n"
        f"code = main(['compile', '-c', {SOFTMAX!r}, '--target', 'emu'])\n"
        "assert code == 0, code\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('ray', 'rich')))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_resources_advertise_a_worker_per_core_or_none(capsys) -> None:
    assert main(["campaign", "resources", "--workers", "3"]) == 0
    assert json.loads(capsys.readouterr().out) == {"emmy:emu": 3.0}
    # a GPU node that benches no emulator: its GPUs alone (none on this machine)
    assert main(["campaign", "resources", "--workers", "0"]) == 0
    assert json.loads(capsys.readouterr().out) == {}
    assert main(["campaign", "resources", "--workers", "-1"]) == 2
    assert "--workers must be 0 or more" in capsys.readouterr().err


def test_plan_refuses_mixed_sources(capsys) -> None:
    assert main(["campaign", "plan", "--grid", "-c", SOFTMAX, "-o", "x.json"]) == 2
    assert "--grid plans the key grid" in capsys.readouterr().err
    assert main(["campaign", "plan", "-c", SOFTMAX, "--every", "2", "-o", "x.json"]) == 2
    assert "give --grid" in capsys.readouterr().err


def test_a_run_for_a_device_kind_the_file_has_no_item_for_is_one_line(tmp_path, capsys) -> None:
    path = write_campaign(tmp_path / "c.json", [softmax_item()])
    assert main(["campaign", "run", str(path), "--devices", "nvidia-h100-sm90"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"emmy: error: {path}: no item is for nvidia-h100-sm90 (the file's device kinds: emu)"
    )


def test_a_damaged_freeze_in_the_output_is_one_line_and_is_kept(tmp_path, capsys) -> None:
    path = write_campaign(tmp_path / "c.json", [softmax_item()])
    damaged = tmp_path / "c.out" / "freeze-000000000000.jsonl"
    damaged.parent.mkdir()
    damaged.write_text('{"format": "emmy-freeze"\n')
    assert main(["campaign", "status", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"emmy: error: {damaged}") and "\n" not in err
    assert damaged.read_text() == '{"format": "emmy-freeze"\n'  # nothing is overwritten
