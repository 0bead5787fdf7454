"""Deliver hostile archives to zipsave's load places, in a process of its own.

``python worker.py JOBS.json RESULTS.jsonl``: each job names a place and the files to hand
it. The worker first runs every place once on a valid archive (so what a place legitimately
imports is imported), then caps its address space, installs an audit hook and runs the jobs,
writing one line per job start and one per result. A crash leaves a start line without a
result; the parent reads it as a crash of that job. A job that times out ends the worker (exit
status ``EXIT_AFTER_TIMEOUT``): the parent runs the jobs left in a fresh one.

The audit hook records what a hostile archive must never cause: a process (``os.system``,
``subprocess.Popen``, ``os.exec*``, ``os.posix_spawn``), a socket, the import of a module
outside the baseline, or an open of a file outside the sandbox and the Python installation.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import signal
import sys
import time
import traceback
import warnings

PROCESS_EVENTS = ("os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "pty.spawn")
#: Top-level packages a load may import lazily (zipsave's own stack and stdlib helpers it uses
#: on error paths); anything else imported during a hostile load is reported.
ALLOWED_IMPORTS = frozenset(
    {
        "zipsave",
        "numpy",
        "torch",
        "gymnasium",
        "stable_baselines3",
        "sb3_contrib",
        "cloudpickle",
        "encodings",
        "zoneinfo",
        "fractions",
        "decimal",
        "difflib",
        "_strptime",
        "calendar",
        "locale",
        "unicodedata",
        "numbers",
        "orjson",
        "isal",  # ISA-L's CRC-32, imported at the first large buffer a load checksums
        "importlib_metadata",
        "textwrap",
        "pprint",
        "reprlib",
        "tqdm",
        "rich",
        "typing_extensions",
        "filelock",
        "fsspec",
        "sympy",
        "mpmath",
        "jinja2",
        "markupsafe",
        "networkx",
        "shutil",
        "tempfile",
        "glob",
        "fnmatch",
        "_compat_pickle",
        "pickletools",
        "zipfile",
        "bz2",
        "lzma",
        "_bz2",
        "_lzma",
        "gzip",
        "queue",
        "concurrent",
        "threading",
        "ctypes",
        "_ctypes",
        "opt_einsum",
        "optree",
        "psutil",
        "cmath",
        "pyexpat",
        "xml",
        "csv",
        "_csv",
        "matplotlib",
        "pandas",
        "pytz",
        "dateutil",
        "six",
        "packaging",
        "argparse",
    }
)

events: list[str] = []
recording = False
sandbox = ""
allowed_roots: tuple[str, ...] = ()
baseline: set[str] = set()


def audit(event: str, args: tuple) -> None:
    if not recording:
        return
    if event.startswith(PROCESS_EVENTS) or event.startswith("socket.") or event == "ctypes.dlopen":
        events.append(f"{event} {args[:2]!r}")
    elif event == "import":
        name = args[0]
        if name not in baseline and name.partition(".")[0] not in ALLOWED_IMPORTS and name not in sys.modules:
            events.append(f"import {name}")
    elif event == "open":
        path, mode = args[0], args[1]
        if isinstance(path, bytes):
            path = path.decode("utf-8", "replace")
        if isinstance(path, str):
            real = os.path.realpath(path)
            if not real.startswith(allowed_roots):
                events.append(f"open {path} {mode!r}")


class Timeout(BaseException):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise Timeout()


def places() -> dict:
    import torch

    import zipsave
    from zipsave import cli

    def sb3():
        import stable_baselines3 as sb3_lib

        import zipsave.sb3

        zipsave.sb3.install()
        return sb3_lib

    def cli_run(*argv: str, ok: tuple = (0, None)) -> None:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                code = cli.main(list(argv))
            except SystemExit as err:
                code = err.code
        if code not in ok:
            raise zipsave.ZipsaveError(f"the command exited {code}")  # the CLI's own refusal

    def ppo_load(f):
        return sb3().PPO.load(f["archive"], device="cpu")

    def set_parameters(f):
        lib = sb3()
        model = lib.PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu")
        model.set_parameters(f["archive"], device="cpu")

    def replay_buffer(f):
        lib = sb3()
        model = lib.DQN("MlpPolicy", "CartPole-v1", buffer_size=64, learning_starts=0, device="cpu")
        model.load_replay_buffer(f["side"])

    def vecnormalize(f):
        lib = sb3()
        from stable_baselines3.common.env_util import make_vec_env
        from stable_baselines3.common.vec_env import VecNormalize

        VecNormalize.load(f["side"], make_vec_env("CartPole-v1", n_envs=1))
        del lib

    def policy_file(f):
        sb3()
        from stable_baselines3.common.policies import ActorCriticPolicy

        ActorCriticPolicy.load(f["policy_file"], device="cpu")

    def dcp_consolidate(f):
        import zipsave.dcp

        zipsave.dcp.consolidate(f["dcp_dir"], os.path.join(sandbox, "out.zip"))

    def dcp_load(f):
        import zipsave.dcp

        zipsave.dcp.load({"x": torch.zeros(2)}, f["archive"])

    return {
        "load": lambda f: zipsave.load(f["archive"]),
        "restore": lambda f: zipsave.restore(torch.nn.Linear(4, 2), f["archive"]),
        "load_archive": lambda f: zipsave.load_archive(f["archive"]),
        "read": lambda f: zipsave.read(f["archive"], "data"),
        "load_cls_ppo": lambda f: zipsave.load(f["archive"], cls=__import__("stable_baselines3").PPO),
        "ppo_load": ppo_load,
        "set_parameters": set_parameters,
        "replay_buffer": replay_buffer,
        "vecnormalize": vecnormalize,
        "policy_file": policy_file,
        "cli_inspect": lambda f: cli_run("inspect", f["archive"]),
        "cli_verify": lambda f: cli_run("verify", f["archive"]),
        # Against the same archive with the payload's key a plain 0: diff decodes both values,
        # compares and prints them (exit status 1: they differ).
        "cli_diff": lambda f: cli_run("diff", f["archive"], f["peer"], ok=(0, 1, None)),
        "dcp_consolidate": dcp_consolidate,
        "dcp_load": dcp_load,
    }


#: Each job's alarm, in CPU seconds of this process (``ITIMER_PROF``: a bomb or a quadratic parse
#: spends them, a loaded CI machine only stretches the wall clock; a job that blocks without
#: spending any is caught by the parent's timeout of the whole worker). The warm-up has none: an
#: alarm that interrupts a first import (torch's lazy ``torch.distributed.tensor`` pulls in
#: sympy) leaves a half-made module in ``sys.modules``, and every later job would fail on it.
JOB_ALARM = 20

#: The exit status after a job that timed out: the alarm may have cut an import short, so the
#: parent runs the jobs left in a fresh worker.
EXIT_AFTER_TIMEOUT = 3


def run_job(place: object, files: dict, alarm: int = JOB_ALARM) -> dict:
    import zipsave

    started = time.process_time()
    outcome, error = "loaded", None
    signal.setitimer(signal.ITIMER_PROF, alarm)
    try:
        place(files)  # type: ignore[operator]
    except Timeout:
        outcome = "timeout"
    except zipsave.ZipsaveError as err:
        outcome, error = "refused", f"{type(err).__name__}: {str(err)[:300]}"
    except MemoryError:
        outcome, error = "memory", "MemoryError"
    except BaseException as err:  # noqa: BLE001 - any other exception is what is reported
        outcome, error = "foreign", f"{type(err).__name__}: {str(err)[:300]}\n{traceback.format_exc()[-1500:]}"
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    return {"outcome": outcome, "error": error, "seconds": round(time.process_time() - started, 3)}


def main() -> None:
    global recording, sandbox, allowed_roots
    jobs_path, out_path = sys.argv[1], sys.argv[2]
    with open(jobs_path) as fp:
        spec = json.load(fp)
    sandbox = os.path.realpath(spec["sandbox"])
    os.chdir(sandbox)
    import sysconfig

    roots = {
        sandbox,
        *(os.path.realpath(r) for r in spec.get("roots", ())),
        "/proc/meminfo",
        os.path.realpath(sys.prefix),
        os.path.realpath(sys.base_prefix),
        "/dev/null",
        "/proc/self",
        os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        *(os.path.realpath(p) for p in sysconfig.get_paths().values()),
        *(os.path.realpath(p) for p in sys.path if p),
        # the interpreter's own bytecode cache where PYTHONPYCACHEPREFIX moves it (CI's venv
        # steps): the imports that read and write it are checked by the import event
        *((os.path.realpath(sys.pycache_prefix),) if sys.pycache_prefix else ()),
    }
    allowed_roots = tuple(sorted(roots))
    warnings.simplefilter("ignore")
    signal.signal(signal.SIGPROF, _alarm)
    table = places()
    # Warm up: every place used, on a valid archive, before anything is recorded.
    for place, files in spec["warmup"]:
        run_job(table[place], files, alarm=0)
    baseline.update(sys.modules)
    soft = int(spec.get("memory_headroom", 2 << 30))
    with open("/proc/self/status") as fp:
        vm = next(int(line.split()[1]) * 1024 for line in fp if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + soft, resource.RLIM_INFINITY))
    sys.addaudithook(audit)
    with open(out_path, "a") as out:
        for job in spec["jobs"]:
            out.write(json.dumps({"start": job["id"]}) + "\n")
            out.flush()
            del events[:]
            recording = True
            result = run_job(table[job["place"]], job["files"])
            recording = False
            if os.path.exists(spec["marker"]):
                events.append(f"created the marker file {spec['marker']}")
                os.remove(spec["marker"])
            result.update(id=job["id"], events=list(events))
            out.write(json.dumps(result) + "\n")
            out.flush()
            if result["outcome"] == "timeout":
                sys.exit(EXIT_AFTER_TIMEOUT)


if __name__ == "__main__":
    main()
