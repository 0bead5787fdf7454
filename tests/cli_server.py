"""``python -m zipsave`` for the tests, without paying its imports each time.

Every ``python -m zipsave`` spends about 2 s of CPU importing torch before its command runs;
test_cli.py and the docs' console examples run some fifty commands per suite. Here one server
process imports ``zipsave.cli`` once (what ``python -m zipsave`` imports before it calls
``main()``) and forks a child per command. The child runs ``zipsave/__main__.py`` as ``-m``
does (``runpy``, ``sys.argv`` and ``__main__`` set alike) in the command's folder, with its
standard output and error in files, and exits through the interpreter's normal shutdown with the
command's status. So each command is its own process, as it would be in a shell; only the
imports before ``main()`` were done once. (The real ``python -m zipsave`` and the ``zipsave``
script still run in test_persist.py's demo test and in CI's release check.)
"""

from __future__ import annotations

import atexit
import json
import locale
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parent)
_server: subprocess.Popen | None = None
_server_env: dict[str, str] | None = None
_lock = threading.Lock()


def run(
    args: list[str], *, env: dict[str, str], cwd: str | os.PathLike | None = None, timeout: float = 300
) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, "-m", "zipsave", *args], capture_output=True,
    text=True, env=env, cwd=cwd, timeout=timeout)``, the command forked from the server."""
    global _server, _server_env
    args = [str(a) for a in args]
    if not hasattr(os, "fork"):  # Windows: a fresh interpreter each time
        return subprocess.run(
            [sys.executable, "-m", "zipsave", *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=timeout,
            check=False,
        )
    with _lock, tempfile.TemporaryDirectory(prefix="zipsave-cli-") as tmp:
        if _server is None or _server.poll() is not None or _server_env != env:
            _stop()
            _server = subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    f"import sys; sys.path.insert(0, {_TESTS!r}); import cli_server; "
                    "del sys.path[0]; cli_server.serve()",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                text=True,
            )
            _server_env = dict(env)
        out, err = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        request = {"argv": args, "cwd": os.fspath(cwd or os.getcwd()), "out": out, "err": err, "timeout": timeout}
        assert _server.stdin is not None and _server.stdout is not None
        _server.stdin.write(json.dumps(request) + "\n")
        _server.stdin.flush()
        answer = _server.stdout.readline()
        assert answer, f"the zipsave command server died (exit status {_server.wait()})"
        reply = json.loads(answer)
        if reply.get("timeout"):
            raise subprocess.TimeoutExpired([sys.executable, "-m", "zipsave", *args], timeout)
        encoding = locale.getpreferredencoding(False)
        return subprocess.CompletedProcess(
            [sys.executable, "-m", "zipsave", *args], reply["returncode"], _text(out, encoding), _text(err, encoding)
        )


def _text(path: str, encoding: str) -> str:
    # as subprocess's text mode reads a pipe: universal newlines
    return Path(path).read_bytes().decode(encoding).replace("\r\n", "\n").replace("\r", "\n")


@atexit.register
def _stop() -> None:
    global _server
    if _server is not None and _server.poll() is None:
        assert _server.stdin is not None
        _server.stdin.close()
        try:
            _server.wait(30)
        except subprocess.TimeoutExpired:
            _server.kill()
            _server.wait()
    if _server is not None:
        assert _server.stdout is not None
        _server.stdout.close()
    _server = None


def serve() -> None:
    """The server: import what ``python -m zipsave`` imports, then one forked command per
    request line on standard input, its status as one JSON line on standard output."""
    import zipsave.cli  # noqa: F401 - imported once, here, for every command

    while line := sys.stdin.readline():
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:  # the command's process: it leaves through the interpreter's exit
            os.chdir(request["cwd"])
            sys.path[0] = os.getcwd()  # what `-m` puts first
            stdin = os.open(os.devnull, os.O_RDONLY)
            os.dup2(stdin, 0)
            for fd, path in ((1, request["out"]), (2, request["err"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
            sys.argv = ["-m"] + request["argv"]
            os._exit(_main())
        deadline = time.monotonic() + request["timeout"]
        timed_out = False
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline and not timed_out:
                os.kill(pid, signal.SIGKILL)
                timed_out = True
            time.sleep(0.005)
        code = os.waitstatus_to_exitcode(status)
        print(json.dumps({"returncode": code, "timeout": timed_out}), flush=True)


def _main() -> int:
    """Run ``zipsave/__main__.py`` as ``-m`` does and leave as the interpreter would: threads
    joined, atexit handlers run, output flushed, the status of ``SystemExit``. Module teardown
    is skipped (0.6 s of CPU with torch imported; nothing of zipsave runs in it)."""
    import atexit
    import runpy
    import threading
    import traceback

    try:
        runpy.run_module("zipsave", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            code = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - as the interpreter reports an uncaught exception
        traceback.print_exc()
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return code
