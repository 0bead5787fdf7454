"""The adversarial suite: every hostile payload of ``tests/adversarial/corpus.py`` delivered to
every load place, each load in a worker process (``tests/adversarial/worker.py``) with an
address-space limit, a time limit and an audit hook.

What must hold for every delivery: nothing ran (no marker file, no process, socket, foreign
import or open outside the sandbox), no crash (a signal exit), no hang (each load under its
time limit), no memory error under the limit, and a refusal is a ``ZipsaveError``. Payloads
that crashed the interpreter get a worker each; the rest share one.
"""

from __future__ import annotations

import base64
import concurrent.futures
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import warnings
import zipfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from adversarial import corpus, worker  # noqa: E402

WORKER = pathlib.Path(__file__).resolve().parent / "adversarial" / "worker.py"
HOSTILE = pathlib.Path(__file__).resolve().parent / "data" / "hostile"
JOB_SECONDS = 15  # CPU seconds of each load; the worker's alarm is 20 CPU seconds


def _make_hostile():
    sys.path.insert(0, str(HOSTILE))
    try:
        import make_hostile
    finally:
        sys.path.remove(str(HOSTILE))
    return make_hostile


def _rebuild(base: bytes, replace: dict[str, bytes], data_extra: dict | None = None) -> bytes:
    """The base archive with members replaced (and ``data`` entries added); manifest redone."""
    mh = _make_hostile()
    members = []
    with zipfile.ZipFile(io.BytesIO(base)) as zf:
        names = [n for n in zf.namelist() if n != "manifest.json"]
        for name in names:
            raw = replace.pop(name, None) if name in replace else zf.read(name)
            if name == "data" and data_extra:
                data = json.loads(raw)
                data.update(data_extra)
                raw = json.dumps(data).encode()
            members.append(mh.Member(name, raw))
    members += [mh.Member(name, raw) for name, raw in replace.items()]
    return mh.build_zip(members)


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    """A small PPO archive, a DCP checkpoint, and valid files for the workers' warm-up."""
    import torch
    import torch.distributed.checkpoint as dcp

    import zipsave

    root = tmp_path_factory.mktemp("adversarial")
    sb3 = pytest.importorskip("stable_baselines3")
    model = sb3.PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu")
    zipsave.save(model, root / "ppo.zip")
    policy_file = root / "policy_file.zip"
    with zipsave.sb3.installed():
        model.policy.save(policy_file)
    dcp_dir = root / "dcp"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "assuming ... a single process": it is
        dcp.save({"x": torch.zeros(2)}, checkpoint_id=str(dcp_dir), no_dist=True)
    side = root / "side.pkl"
    side.write_bytes(corpus.program({"a": 1}))
    return {
        "root": root,
        "ppo": (root / "ppo.zip").read_bytes(),
        "policy_file": str(policy_file),
        "dcp_dir": str(dcp_dir),
        "side": str(side),
    }


def _deliveries(payload: corpus.Payload, assets: dict, folder: pathlib.Path, sb3: bool) -> list[tuple[str, dict]]:
    folder.mkdir(parents=True)
    out = _all_deliveries(payload, assets, folder)
    return out if sb3 else [(place, files) for place, files in out if place not in corpus.SB3_DOORS]


def _all_deliveries(payload: corpus.Payload, assets: dict, folder: pathlib.Path) -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = []

    def write(name: str, raw: bytes) -> str:
        path = folder / name
        path.write_bytes(raw)
        return str(path)

    def dcp_with(metadata: bytes) -> str:
        target = folder / "dcp"
        shutil.copytree(assets["dcp_dir"], target)
        (target / ".metadata").write_bytes(metadata)
        return str(target)

    if payload.pickle is not None:
        raw = payload.pickle
        entry = {":type:": "<class 'object'>", ":serialized:": base64.b64encode(raw).decode()}
        if "data" in payload.via:
            archive = write("data.zip", _rebuild(assets["ppo"], {}, {"evil": entry}))
            peer = write("data_peer.zip", _rebuild(assets["ppo"], {}, {"evil": 0}))
            out += [(place, {"archive": archive, "peer": peer}) for place in corpus.PICKLE_PLACES["data"]]
        if "side" in payload.via:
            side = write("side.pkl", raw)
            out += [(place, {"side": side}) for place in corpus.PICKLE_PLACES["side"]]
        if "policy_file" in payload.via:
            policy = write("policy.pth", corpus.pth_with_pickle(raw))
            out += [(place, {"policy_file": policy}) for place in corpus.PICKLE_PLACES["policy_file"]]
        if "pth" in payload.via:
            archive = write("pth.zip", _rebuild(assets["ppo"], {"policy.pth": corpus.pth_with_pickle(raw)}))
            out += [(place, {"archive": archive}) for place in corpus.PICKLE_PLACES["pth"]]
        if "dcp_meta" in payload.via:
            out += [(place, {"dcp_dir": dcp_with(raw)}) for place in corpus.PICKLE_PLACES["dcp_meta"]]
    if payload.json is not None:
        key = "env" if payload.name.startswith("sb3_env") else "evil"
        key = "learning_rate" if payload.name.startswith("sb3_learning_rate") else key
        archive = write("json.zip", _rebuild(assets["ppo"], {}, {key: payload.json}))
        peer = write("json_peer.zip", _rebuild(assets["ppo"], {}, {key: 0}))
        out += [(place, {"archive": archive, "peer": peer}) for place in corpus.JSON_PLACES]
    if payload.members is not None:
        members = dict(payload.members)
        if "policy_file" in members:
            out.append(("policy_file", {"policy_file": write("policy.pth", members.pop("policy_file"))}))
        if "dcp_meta" in members:
            out.append(("dcp_consolidate", {"dcp_dir": dcp_with(members.pop("dcp_meta"))}))
        if members:
            archive = write("members.zip", _rebuild(assets["ppo"], members))
            out += [(place, {"archive": archive}) for place in corpus.MEMBER_PLACES]
    return out


def _dcp_traversal(assets: dict) -> list[corpus.Payload]:
    """DCP metadata whose storage paths leave the checkpoint (the path-traversal family)."""
    import pickle

    raw = (pathlib.Path(assets["dcp_dir"]) / ".metadata").read_bytes()
    out = []
    for name, target in (
        ("dcp_relative_path_absolute", "/etc/hostname"),
        ("dcp_relative_path_dotdot", "../../../etc/hostname"),
        ("dcp_relative_path_dev_zero", "/dev/zero"),
    ):
        metadata = pickle.loads(raw)  # our own checkpoint, written just above
        for info in metadata.storage_data.values():
            info.relative_path = target
        out.append(corpus.Payload(name, "i27a", members={"dcp_meta": pickle.dumps(metadata)}))
    return out


def _warmup(assets: dict) -> list:
    import_archive = str(assets["root"] / "ppo.zip")
    files = {
        "archive": import_archive,
        "peer": import_archive,
        "side": assets["side"],
        "policy_file": assets["policy_file"],
        "dcp_dir": assets["dcp_dir"],
    }
    places = [
        "load",
        "restore",
        "load_archive",
        "read",
        "load_cls_ppo",
        "ppo_load",
        "set_parameters",
        "replay_buffer",
        "vecnormalize",
        "policy_file",
        "cli_inspect",
        "cli_verify",
        "cli_diff",
        "dcp_consolidate",
        "dcp_load",
    ]
    return [[place, files] for place in places]


def _run_worker(sandbox: pathlib.Path, jobs: list[dict], assets: dict, timeout: float) -> tuple[list[dict], str]:
    """Run ``jobs`` in a worker; after a job that timed out (the worker exits: its alarm may have
    cut an import short) or crashed the worker, the jobs left run in a fresh one, each worker in
    its own sandbox. A job left unrun by a worker that ran none of them is reported as such."""
    out: list[dict] = []
    status = ""
    left = jobs
    for attempt in range(len(jobs)):
        found, status, _ = _one_worker(sandbox / f"w{attempt}", left, assets, timeout)
        unrun = [job for job, r in zip(left, found) if r["outcome"] == "not run"]
        if len(unrun) == len(left):  # the worker ran nothing (it failed to start): no retry
            return out + found, status
        out += [r for r in found if r["outcome"] != "not run"]
        left = unrun
        if not left:
            break
    return out, status


def _one_worker(sandbox: pathlib.Path, jobs: list[dict], assets: dict, timeout: float) -> tuple[list[dict], str, bool]:
    sandbox.mkdir(parents=True, exist_ok=True)
    spec = sandbox / "jobs.json"
    results = sandbox / "results.jsonl"
    places = {job["place"] for job in jobs}
    spec.write_text(
        json.dumps(
            {
                "sandbox": str(sandbox),
                "jobs": jobs,
                "marker": corpus.MARKER,
                "warmup": [w for w in _warmup(assets) if w[0] in places],
                # The archives handed to the places, and the files they are made from, may be read.
                "roots": [str(sandbox.parent.parent.parent), str(assets["root"])],
            }
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(pathlib.Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    env.pop("PYTHONWARNINGS", None)
    timed_out = False
    try:
        proc = subprocess.run(
            [sys.executable, str(WORKER), str(spec), str(results)],
            cwd=sandbox,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        timed_out = proc.returncode == worker.EXIT_AFTER_TIMEOUT
        status = f"exit {proc.returncode}: {proc.stderr[-2000:]}" if proc.returncode and not timed_out else ""
    except subprocess.TimeoutExpired:
        status = "worker timed out"
    lines = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
    done = {line["id"]: line for line in lines if "outcome" in line}
    out = []
    for job in jobs:
        if job["id"] in done:
            out.append(done[job["id"]])
        elif any(line.get("start") == job["id"] for line in lines):
            out.append({"id": job["id"], "outcome": "crash", "error": status, "events": [], "seconds": None})
        else:
            out.append({"id": job["id"], "outcome": "not run", "error": status, "events": [], "seconds": None})
    return out, status, timed_out


def _problems(result: dict, marker_made: bool) -> list[str]:
    found = []
    if result["outcome"] not in ("refused", "loaded"):
        found.append(f"{result['outcome']}: {result['error']}")
    if result["events"]:
        found.append(f"ran: {result['events']}")
    if result["seconds"] is not None and result["seconds"] > JOB_SECONDS:
        found.append(f"took {result['seconds']} s")
    if marker_made:
        found.append(f"the marker file {corpus.MARKER} was created")
    return found


@pytest.fixture(scope="module")
def outcomes(assets, tmp_path_factory):
    """Every payload in every place: {payload name: [(place, result)]}."""
    payloads = corpus.all_payloads() + _dcp_traversal(assets)
    sample = corpus.sb3_sample(payloads)
    root = tmp_path_factory.mktemp("deliveries")
    batched: list[dict] = []
    crashing: list[tuple[int, list[dict]]] = []
    owner: dict[str, tuple[str, str]] = {}
    for payload in payloads:
        jobs = []
        for i, (place, files) in enumerate(_deliveries(payload, assets, root / payload.name, payload.name in sample)):
            job_id = f"{payload.name}#{i}"
            owner[job_id] = (payload.name, place)
            jobs.append({"id": job_id, "place": place, "files": files})
        cost = len(jobs) * len(payload.pickle or b"")  # the crash family's are deep pickles
        (crashing.append((cost, jobs)) if payload.crash else batched.extend(jobs))
    # Four workers, two at a time: the crash family apart from the rest (a job that kills its
    # worker has the jobs after it run in a fresh one, _run_worker), in two halves of about
    # equal cost, largest first. Each worker first warms up every place it serves.
    halves: list[tuple[int, list[dict]]] = [(0, []), (0, [])]
    for cost, jobs in sorted(crashing, key=lambda c: -c[0]):
        spent, held = min(halves, key=lambda h: h[0])
        halves[halves.index((spent, held))] = (spent + cost, held + jobs)
    half = len(batched) // 2
    runs = [(f"crash{i}", jobs, 600.0) for i, (_, jobs) in enumerate(halves)]
    runs += [("batch0", batched[:half], 600.0), ("batch1", batched[half:], 600.0)]
    results: dict[str, list] = {p.name: [] for p in payloads}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = {
            pool.submit(_run_worker, root / "sandbox" / name, jobs, assets, timeout): name
            for name, jobs, timeout in runs
        }
        for future in concurrent.futures.as_completed(futures):
            sandbox = root / "sandbox" / futures[future]
            found, _ = future.result()
            marker = any((used / corpus.MARKER).exists() for used in sandbox.glob("w*"))
            for result in found:
                name, place = owner[result["id"]]
                results[name].append((place, result, marker))
    return results


ALL = corpus.all_payloads()
NAMES = [p.name for p in ALL] + ["dcp_relative_path_absolute", "dcp_relative_path_dotdot", "dcp_relative_path_dev_zero"]


@pytest.mark.parametrize("name", NAMES)
def test_payload_is_harmless_everywhere(name, outcomes):
    deliveries = outcomes[name]
    assert deliveries, f"{name} was delivered nowhere"
    problems = [f"{place}: {p}" for place, result, marker in deliveries for p in _problems(result, marker)]
    assert not problems, "\n".join(problems)


def test_every_family_is_refused_somewhere(outcomes):
    # A corpus whose payloads all "load" would test nothing: the classic, crash, hang, memory
    # and build families are each refused with a ZipsaveError where they are delivered.
    by_family: dict[str, set[str]] = {}
    for payload in ALL:
        for _, result, _ in outcomes[payload.name]:
            by_family.setdefault(payload.family, set()).add(result["outcome"])
    for family in ("classic", "crash", "hang", "memory", "build"):
        assert "refused" in by_family[family], family
