"""Campaigns on Ray with two emulator workers. On a local Ray that the run starts: the same
rows as benching the items one by one, and an item no worker can take. On a cluster started
with `ray start` as docs/campaigns.md says, joined with --address: a campaign's rows, a
worker killed mid-item, an item that fails every try, a driver interrupted and run again.
Each campaign runs as its own `emmy campaign run` process, as a user runs it, so that the
test can kill its workers and interrupt it.

A pytest worker starts the cluster once, for the module's tests it runs (a Ray start takes
seconds, tens of seconds on a busy machine), and stops it after them.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from emmy.base.errors import EmmyError
from emmy.campaign.items import load_campaign
from emmy.campaign.output import CampaignOutput
from emmy.campaign.planner import plan
from emmy.cli import main
from emmy.dataset.dataset_store import frozen_line, row_cell
from emmy.frontend.cache import traced_graph_text
from emmy.recall.tuning_db import ReadOnlyDB

pytest.importorskip("ray", reason="Ray is the campaign extra, which the test extra pulls in")

EMMY = str(Path(sys.executable).with_name("emmy"))
#: 9 one-site expressions (three families at three shapes), small enough that the emulator
#: runs each config in well under a second (a test runs all of them or a slice)
EXPRESSIONS = [
    expression
    for rows, cols in [(4, 32), (8, 48), (2, 64)]
    for expression in (
        f"torch.softmax(torch.randn({rows}, {cols}), -1)",
        f"torch.randn({rows}, {cols}).sum(-1)",
        f"torch.nn.functional.gelu(torch.randn({rows}, {cols}) * 2.0)",
    )
]
#: the default and one seeded random config per site
SAMPLE = 1
WORKER_TITLE = b"ray::bench_item"
#: how long the cluster's workers wait for the tuning database's write lock (emmy's default
#: is 30 s): longer than a loaded machine takes to start the worker beside the waiting one
LOCK_WAIT_S = 120


@pytest.fixture(scope="module")
def campaign_file(tmp_path_factory) -> Path:
    """The campaign of EXPRESSIONS on emu, planned once for the module."""
    path = tmp_path_factory.mktemp("plan") / "campaign.json"
    sources = [(traced_graph_text(e), (), f"<{e}>", "", e) for e in EXPRESSIONS]
    campaign = plan(
        path,
        sources,
        ["emu"],
        configs={"sample": SAMPLE},
        max_rows=SAMPLE,
        progress=lambda _: None,
    )
    campaign.write()
    return path


def copy_of(campaign_file: Path, folder: Path, items: slice = slice(None)) -> Path:
    """The campaign (some of its items) in a folder of its own, with no output yet."""
    data = json.loads(campaign_file.read_text())
    data["items"] = data["items"][items]
    path = folder / "campaign.json"
    path.write_text(json.dumps(data, indent=1))
    return path


@dataclass(frozen=True)
class Cluster:
    """A Ray head on this machine, started as docs/campaigns.md starts one."""

    address: str
    env: dict[str, str]  # the environment of a driver that joins it: its token
    head: int  # the pid of its `ray start --block`, above every process of the cluster
    resources: str  # what `emmy campaign resources --workers 2` printed; the head has them


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[Cluster]:
    """A head started as docs/campaigns.md says (`ray start --resources "$(emmy campaign
    resources)"`, token authentication on), whose workers every campaign of the module but
    the local one runs on (--address)."""
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    # a worker's write waits for a lock as long as a test holds one (the interrupted
    # campaign's), however slowly a loaded machine starts the worker that runs beside it
    env["EMMY_DB_BUSY_TIMEOUT"] = str(LOCK_WAIT_S)
    resources = subprocess.run(
        [EMMY, "campaign", "resources", "--workers", "2"], capture_output=True, text=True
    ).stdout.strip()
    port = free_port()
    # a short folder: Ray's sockets live under it, and a socket's path is at most 107 bytes
    temp = tempfile.mkdtemp(prefix="emmy-ray-", dir="/tmp")
    ray = str(Path(sys.executable).with_name("ray"))
    log = tmp_path_factory.mktemp("ray-head") / "head.log"
    with log.open("w") as sink:  # a file: a pipe nobody drains would stall the head
        head = subprocess.Popen(
            [ray, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
             f"--resources={resources}", "--include-dashboard=false", f"--temp-dir={temp}",
             "--disable-usage-stats"],
            env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in log.read_text():  # it takes drivers from then on
            assert head.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.1)
        yield Cluster(f"127.0.0.1:{port}", env, head.pid, resources)
    finally:
        # the head's processes are its session's (a graceful stop takes half a minute)
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=60)
        left = [pid for pid in all_pids() if temp.encode() in _cmdline(pid)]
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def start(path: Path, db: Path, cluster: Cluster | None, *extra: str) -> subprocess.Popen:
    """`emmy campaign run` on the cluster, or with no cluster on a local Ray of two workers."""
    where = ["--workers", "2"] if cluster is None else ["--address", cluster.address]
    return subprocess.Popen(
        [EMMY, "campaign", "run", str(path), *where, "--worker-db", str(db), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=None if cluster is None else cluster.env,
        # a suite started in the background inherits SIGINT ignored, and so would the driver:
        # interrupted, it would run on to the end
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err


def expected_cells(path: Path) -> set[tuple]:
    campaign = load_campaign(path)
    return {cell for _, _, cells in campaign.iter_cells(["emu"]) for cell, _ in cells}


def output_rows(path: Path) -> dict:
    campaign = load_campaign(path)
    return CampaignOutput(campaign.output, str(path)).rows


def descendants(root: int) -> list[int]:
    """The processes below `root`, by their parents in /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    below, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        below += children
        frontier += children
    return below


def busy_worker(cluster: Cluster, deadline: float) -> int:
    """The pid of a Ray worker of the cluster that is benching an item (the tests run one
    campaign at a time: it is the running campaign's)."""
    while time.monotonic() < deadline:
        for pid in descendants(cluster.head):
            try:
                title = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if title.startswith(WORKER_TITLE):
                return pid
        time.sleep(0.05)
    raise AssertionError("no Ray worker started benching an item")


def killed_mid_item(path: Path, db: Path, cluster: Cluster, *extra: str) -> str:
    """Runs the campaign on the cluster, kills (SIGKILL) the first worker seen benching an
    item, and returns what the driver printed on stderr once it completed."""
    driver = start(path, db, cluster, *extra)
    os.kill(busy_worker(cluster, time.monotonic() + 120), signal.SIGKILL)
    code, _, err = finish(driver)
    assert code == 0, err
    return err


def cell_of_bench_row(row) -> tuple:
    return (row.family, row.key, json.dumps(row.config, sort_keys=True), row.origin)


def test_a_campaign_gives_the_rows_of_benching_its_items_one_by_one(
    campaign_file, tmp_path, capsys
) -> None:
    path = copy_of(campaign_file, tmp_path)
    # one more item, for a device kind no worker has: left, not waited for
    data = json.loads(path.read_text())
    data["items"].append({**data["items"][0], "devices": ["nvidia-h200-sm90"]})
    path.write_text(json.dumps(data))
    code, out, err = finish(start(path, tmp_path / "workers.db", None))
    assert code == 0, err
    unplaceable = [line for line in err.splitlines() if "unplaceable" in line]
    assert unplaceable == [
        "emmy: campaign: 1 item(s) for nvidia-h200-sm90 unplaceable: no worker in the cluster "
        "has that device (workers: emu ×2); left for a run on a cluster that has one"
    ]
    rows = output_rows(path)
    assert set(rows) == expected_cells(path)
    assert all(row.status in ("ok", "unstable") for row in rows.values())
    assert "emu" in out and "campaign summary" in out
    # the same expressions benched one by one, as `emmy run --bench` does
    one_by_one = tmp_path / "one-by-one.db"
    for expression in EXPRESSIONS:
        argv = ["run", "-c", expression, "--bench", "--db", str(one_by_one), "--oracles",
                "default", "--sample", str(SAMPLE), "--max-rows", str(SAMPLE)]  # fmt: skip
        assert main(argv) == 0
    capsys.readouterr()
    with ReadOnlyDB(one_by_one) as db:
        benched = db.rows()
    assert sorted(map(cell_of_bench_row, benched)) == sorted(map(cell_of_bench_row, rows.values()))
    status = subprocess.run([EMMY, "campaign", "status", str(path)], capture_output=True, text=True)
    assert "nvidia-h200-sm90: 0/2 cells done (0 failed), 2 left" in status.stdout


def test_a_campaign_joins_a_cluster_whose_nodes_advertise_their_devices(
    campaign_file, cluster, tmp_path
) -> None:
    """The head advertises what `emmy campaign resources` printed, and a campaign run with
    --address (and the cluster's token) measures every cell on its workers."""
    assert json.loads(cluster.resources) == {"emmy:emu": 2.0}
    path = copy_of(campaign_file, tmp_path, slice(0, 2))
    run = [EMMY, "campaign", "run", str(path), "--address", cluster.address,
           "--worker-db", str(tmp_path / "workers.db")]  # fmt: skip
    done = subprocess.run(run, env=cluster.env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(output_rows(path)) == expected_cells(path)


def test_a_worker_killed_mid_item_has_its_item_retried(campaign_file, cluster, tmp_path) -> None:
    path = copy_of(campaign_file, tmp_path, slice(0, 8))
    err = killed_mid_item(path, tmp_path / "workers.db", cluster)
    rows = output_rows(path)
    # every cell once, measured: none is a failure row of the killed try
    assert set(rows) == expected_cells(path)
    assert all(row.status in ("ok", "unstable") for row in rows.values()), err
    assert len(list((path.parent / "campaign.out").glob("*.jsonl"))) == 1


def test_an_item_that_fails_every_try_becomes_failure_rows(
    campaign_file, cluster, tmp_path
) -> None:
    path = copy_of(campaign_file, tmp_path, slice(0, 3))
    err = killed_mid_item(path, tmp_path / "workers.db", cluster, "--retries", "0")
    rows = output_rows(path)
    assert set(rows) == expected_cells(path)
    failed = [row for row in rows.values() if row.status == "launch_error"]
    assert failed, err
    assert all(
        row.message.startswith("campaign: the item failed: its worker died on each of 1 tries")
        for row in failed
    )
    assert "failed every try" in err


def rows_so_far(path: Path) -> dict:
    """The rows of a campaign's output while its driver writes it (a freeze the driver has
    just superseded can vanish between listing the folder and reading it: then none yet)."""
    try:
        return output_rows(path)
    except EmmyError:
        return {}


def none_benching(cluster: Cluster, deadline: float) -> None:
    """Waits until no Ray worker of the cluster is benching an item."""
    while any(_cmdline(pid).startswith(WORKER_TITLE) for pid in descendants(cluster.head)):
        assert time.monotonic() < deadline, "a Ray worker still benches an item"
        time.sleep(0.05)


def test_an_interrupted_driver_loses_nothing_and_measures_nothing_twice(
    campaign_file, cluster, tmp_path
) -> None:
    """The interrupt lands while an item is still to come, by construction, not by timing:
    the test holds the workers' database's write lock (`BEGIN IMMEDIATE`) for as long as
    the driver runs. Items 0 and 1 were measured into that database beforehand, so a worker
    recalls their rows (reads, which the lock does not block) and the driver receives them;
    item 2 has no row there, and a worker writes each row it measures before its item
    returns, so item 2 cannot return while the lock is held. It is the only item that waits
    on the lock, and the cluster has two workers: whichever order Ray hands the items out
    in, a worker is free for items 0 and 1.

    The one time left in it is the workers' busy timeout: a worker that waited that long for
    the lock would give up, and item 2 would return as failure rows. The cluster sets it to
    LOCK_WAIT_S, four times emmy's default, and the test starts the driver once no earlier
    test's item holds a slot. A stall that long fails the test (the driver exits 0, or item
    2's rows are failures); it cannot pass it wrongly."""
    path = copy_of(campaign_file, tmp_path, slice(0, 3))
    cells = {i: {cell for cell, _ in c} for i, _, c in load_campaign(path).iter_cells(["emu"])}
    recallable = cells[0] | cells[1]
    # items 0 and 1 into the workers' database, benched as `emmy run --bench` benches their
    # expressions: the cells a campaign's worker measures (the first test shows it), in a
    # fraction of the time of a campaign run
    workers_db = tmp_path / "workers.db"
    for expression in EXPRESSIONS[:2]:
        argv = ["run", "-c", expression, "--bench", "--db", str(workers_db), "--oracles",
                "default", "--sample", str(SAMPLE), "--max-rows", str(SAMPLE)]  # fmt: skip
        assert main(argv) == 0
    with ReadOnlyDB(workers_db) as db:
        assert {row_cell(row) for row in db.rows()} == recallable
    gate = sqlite3.connect(workers_db, isolation_level=None)
    driver = None
    none_benching(cluster, time.monotonic() + 120)  # both of the cluster's slots are free
    try:
        gate.execute("BEGIN IMMEDIATE")  # no worker writes a row until it is rolled back
        driver = start(path, workers_db, cluster)
        deadline = time.monotonic() + 300
        while not recallable <= set(rows_so_far(path)):
            assert time.monotonic() < deadline and driver.poll() is None, "no row arrived"
            time.sleep(0.05)
        driver.send_signal(signal.SIGINT)
        code, _, err = finish(driver)
        assert code == 130, err
        assert f"interrupted: {len(recallable)} row(s) kept" in err
        assert "run the campaign again" in err
        # a worker still waiting to write one of item 2's rows would write it once the lock
        # goes, while the next run measures item 2 again: the lock goes once none is left
        none_benching(cluster, time.monotonic() + 120)
    finally:
        gate.close()  # which rolls the lock's empty transaction back
        if driver is not None and driver.poll() is None:
            driver.kill()
    received = {cell: frozen_line(row) for cell, row in output_rows(path).items()}
    assert set(received) == recallable
    code, out, err = finish(start(path, workers_db, cluster))
    assert code == 0, err
    final = output_rows(path)
    assert set(final) == expected_cells(path)
    assert all(frozen_line(final[cell]) == line for cell, line in received.items())
    # every cell was measured once: the bench above measured items 0 and 1, the
    # interrupted run recalled them from the workers' database, and the run again skipped
    # what the interrupted one had received and measured only item 2
    with ReadOnlyDB(workers_db) as db:
        measured = Counter(row_cell(row) for row in db.rows())
    assert set(measured) == expected_cells(path)
    assert max(measured.values()) == 1
    resumed = subprocess.run(
        [EMMY, "campaign", "status", str(path)], capture_output=True, text=True
    )
    assert "nothing left" in resumed.stdout


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
