"""Bin workers the console script forks itself as it starts (``bin_processes.prefork``), with no fork server.

Each case runs in a fresh process, as the console script does (pytest's own has Spark's threads, where
``prefork`` must refuse): the workers are children of that process, run real bin tasks (captured from a
compaction of a delta-spark table), are fitted to the run's worker count, are replaced by the fork server's
when one dies, and are all joined whether a run took them or not. The end-to-end check through the console
script is in tests/test_fixed_cost.py.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from tests.test_bin_processes import small_files, tasks  # noqa: F401 - fixtures

SCRIPT = """
import json, os, pickle, signal, sys, threading
from multiprocessing import forkserver
from dbt_delta_optimize.engine import bin_processes as bp

def parent(pid):
    return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])

mode, tasks = sys.argv[1], pickle.load(open(sys.argv[2], "rb"))
report = {}
if mode == "thread":
    stop = threading.Event(); thread = threading.Thread(target=stop.wait); thread.start()
    report["forked"] = bp.prefork(2)
    stop.set(); thread.join()
else:
    report["forked"] = bp.prefork(2)
    first = bp._PREFORKED[0].processes()
    report["parents"] = [parent(p.pid) == os.getpid() for p in first]
    if mode == "unused":
        bp.close_preforked()
    else:
        pool = bp.take_preforked(1 if mode == "fit" else 2)
        if mode == "died":
            victim = pool._live[0].process
            os.kill(victim.pid, signal.SIGKILL); victim.join(10)
        outcomes = []
        error = pool.run(tasks, outcomes.append)
        report["error"] = repr(error) if error else None
        report["outcomes"] = [type(o).__name__ for o in outcomes]
        pids = {o.worker.pid for o in outcomes}
        report["by_first"] = sorted(pids & {p.pid for p in first})
        server = forkserver._forkserver._forkserver_pid
        report["by_server"] = sum(1 for p in pool.processes() if p.is_alive() and parent(p.pid) == server)
        report["live"] = len([w for w in pool._live if not w.told_to_end])
        pool.close()
    report["ended"] = [p.exitcode for p in first]
    report["preforked"] = bp.preforked()
report["children"] = len(__import__("multiprocessing").active_children())
print(json.dumps(report))
"""


def _fresh(mode: str, tasks_path: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode, tasks_path], capture_output=True, text=True, timeout=120, env=env
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture()
def tasks_file(tasks, tmp_path):  # noqa: F811 - the fixture imported above
    path = str(tmp_path / "tasks.pickle")
    with open(path, "wb") as fh:
        pickle.dump(tasks[:3], fh)
    return path


@pytest.mark.timeout(180)
def test_preforked_workers_are_this_process_children_and_run_bins(tasks_file):
    report = _fresh("run", tasks_file)
    assert report["forked"] and report["parents"] == [True, True]
    assert report["error"] is None and report["outcomes"] == ["Rewritten"] * 3
    assert report["by_first"], "the bins ran in no preforked worker"
    assert report["by_server"] == 0  # no fork server was needed
    assert report["ended"] == [0, 0] and not report["preforked"] and report["children"] == 0


@pytest.mark.timeout(180)
def test_a_run_with_fewer_workers_ends_the_extra_one(tasks_file):
    report = _fresh("fit", tasks_file)
    assert report["forked"] and report["live"] == 1
    assert report["outcomes"] == ["Rewritten"] * 3 and len(report["by_first"]) == 1
    assert report["ended"] == [0, 0] and report["children"] == 0


@pytest.mark.timeout(180)
def test_a_preforked_worker_that_died_is_replaced_by_the_fork_servers(tasks_file):
    """Forking again from the driver is not safe once it runs threads: the replacement comes from the fork server."""
    report = _fresh("died", tasks_file)
    assert report["error"] is None and report["outcomes"] == ["Rewritten"] * 3  # no bin lost with the process
    assert report["by_server"] == 1  # forked by the server, which started for it
    assert report["ended"][0] == -9 and report["ended"][1] == 0
    assert report["children"] == 0


@pytest.mark.timeout(180)
def test_unused_preforked_workers_are_joined(tasks_file):
    report = _fresh("unused", tasks_file)
    assert report["forked"] and report["ended"] == [0, 0] and not report["preforked"] and report["children"] == 0


@pytest.mark.timeout(180)
def test_prefork_refuses_while_a_thread_runs(tasks_file):
    """A fork copies only the calling thread: with another one running (its locks held), no worker is forked."""
    report = _fresh("thread", tasks_file)
    assert report == {"forked": False, "children": 0}
