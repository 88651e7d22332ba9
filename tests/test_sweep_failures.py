"""Sweeps that fail cleanly (issue 41, item 4): each failure is one line on stderr and exit status 2
(Ctrl-C: 130), within a bounded time, and the points finished before it are printed and kept in the
cache. A scheduler address where another server answers, a relative or empty cache, a grid or a
Dask worker without the memory for a point, a worker whose lib has other code, a scheduler that dies
mid-sweep, Ctrl-C with Dask; results stream as each point finishes; progress and help."""
import io
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

import lib
from conftest import ctrl_c_group
from lib.cli import main
from lib.experiments import sweep as engine
from lib.experiments import workers
from lib.experiments.store import Store, point_prefix

distributed = pytest.importorskip("distributed", reason="dask[distributed] is in requirements.txt")

TINY = ["--V", "16", "--d", "32", "--L", "4", "--n-test", "256", "--seeds", "2", "--threshold", "0.9",
        "--device", "cpu"]
BASE = lib.TaskConfig(V=16, d=32, L=4, device="cpu")
FAST = dict(seeds=2, n_test=256, threshold=0.9)
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
# three grid points on one worker: d = 32 finishes in a second or two, d = 4 and d = 5 never reach the
# threshold (each search doubles to n_max: seconds on an idle machine, tens on a loaded one). Dask may run them
# in any order, but when the first point streams at least one slow point is still to come, so a failure can
# be made to land before the sweep ends
TWO = ["--V", "16", "--d", "32", "4", "5", "--L", "8", "--no-trigger-in-value", "--seeds", "3", "--n-test", "1024",
       "--device", "cpu", "--json"]
GRID_D = {32, 4, 5}


def cli(capsys, *args):
    try:
        rc = main(list(args))
    except SystemExit as err:
        rc = err.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def one_line(err):
    lines = err.strip().splitlines()
    return len(lines) == 1 and "Traceback" not in err


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc=None, within=60):
    deadline = time.time() + within
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            assert proc is None or proc.poll() is None, "the server died"
            time.sleep(0.1)
    raise AssertionError(f"nothing listens on port {port}")


@pytest.fixture
def quick_connect(monkeypatch):
    monkeypatch.setattr(workers, "CONNECT_TIMEOUT", "2s")


@pytest.fixture
def thread_cluster():
    """A one-worker Dask cluster in this process (threads, no process to start), over tcp."""
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                                  host="127.0.0.1", dashboard_address=None, memory_limit=0,
                                  silence_logs=logging.CRITICAL) as cluster:
        yield cluster


# ----------------------------------------------------------------------------- the address

@pytest.mark.slow
def test_an_http_server_at_the_scheduler_address_is_refused_in_one_line(capsys, tmp_path, quick_connect):
    """`python -m http.server` at --scheduler: Dask's client hung there, or read the reply as a frame
    length and tried to allocate 3.07 EiB (status 1). Now: exit 2, one line naming --scheduler, within
    the connect timeout; nothing computed."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path)
    try:
        wait_listening(port, server)
        t0 = time.time()
        rc, out, err = cli(capsys, "sweep", *TINY, "--backend", "dask", "--scheduler", f"tcp://127.0.0.1:{port}",
                           "--cache", str(tmp_path / "c.jsonl"))
        took = time.time() - t0
    finally:
        server.kill()
        server.wait(10)
    assert rc == 2 and out == "" and one_line(err) and f"--scheduler tcp://127.0.0.1:{port}" in err, err
    assert took < 15 and not (tmp_path / "c.jsonl").exists()


def test_a_server_that_answers_first_with_something_else_is_refused(capsys, quick_connect):
    """A server that writes first (an HTTP reply, a banner): its first 8 bytes are no Dask handshake."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        for _ in range(3):
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.sendall(b"HTTP/1.0 400 Bad request\r\nContent-Length: 0\r\n\r\n")
            conn.close()
    threading.Thread(target=serve, daemon=True).start()
    try:
        rc, out, err = cli(capsys, "sweep", *TINY, "--backend", "dask", "--scheduler", f"tcp://127.0.0.1:{port}")
    finally:
        listener.close()
    assert rc == 2 and one_line(err) and "--scheduler" in err and "not a Dask scheduler" in err, err


def test_a_real_scheduler_passes_the_probe(thread_cluster):
    workers.probe(thread_cluster.scheduler_address, 5.0)
    with pytest.raises(ValueError, match="^scheduler tcp://127.0.0.1:9: no Dask scheduler answers"):
        workers.probe("tcp://127.0.0.1:9", 0.5)                      # refused, retried for 0.5 s


# ----------------------------------------------------------------------------- the cache

def test_an_empty_cache_is_refused_before_any_point(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(capsys, "sweep", *TINY, "--cache", "")
    assert rc == 2 and out == "" and one_line(err) and "cache" in err, err
    assert os.listdir(tmp_path) == []


def test_a_relative_cache_is_shipped_to_workers_as_an_absolute_path(tmp_path, monkeypatch):
    """What the client sends to each Dask task carries the cache's absolute path (a worker resolves a
    relative one in its own folder)."""
    monkeypatch.chdir(tmp_path)
    shipped = []

    def fake(task, items, names, need, jobs, scheduler, **kw):
        shipped.extend(items)
        return iter(())
    monkeypatch.setattr(engine, "dask_results", fake)
    engine.sweep([BASE], backend="dask", scheduler="tcp://10.0.0.1:8786", cache="points.jsonl", **FAST)
    assert [item[2].path for item in shipped] == [str(tmp_path / "points.jsonl")]


# ----------------------------------------------------------------------------- memory

def test_a_grid_that_cannot_fit_is_refused_before_any_work(capsys, tmp_path):
    """The largest point searched up to n_max, against the memory available: refused naming n_max,
    and with worker processes naming jobs, before anything is computed or written."""
    avail = lib.core.config.available_memory()
    if avail is None:
        pytest.skip("the available memory is unknown here")
    cache = tmp_path / "c.jsonl"
    big = str(4 * avail // (5 * 64))                                  # 4.6 B x n_max x L > avail at L = 64
    rc, out, err = cli(capsys, "sweep", *TINY[:4], "--L", "4", "64", *TINY[6:], "--n-max", big,
                       "--cache", str(cache))
    assert rc == 2 and out == "" and one_line(err) and f"n_max = {big} needs about" in err and "L=64" in err, err
    assert not cache.exists()
    per_point = workers.point_bytes(BASE, 2 ** 20, 256)
    jobs = avail // per_point + 2
    configs = engine.grid(BASE, V=range(16, 16 + jobs))
    with pytest.raises(ValueError, match=f"^jobs = {jobs} needs about"):
        engine.sweep(configs, jobs=jobs, backend="loky", **FAST)


def test_a_dask_worker_without_the_memory_for_a_point_is_refused_before_submitting(capsys, tmp_path):
    """Each worker's memory_limit, as the scheduler reports it, must hold the largest point."""
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                                  host="127.0.0.1", dashboard_address=None, memory_limit="300MiB",
                                  silence_logs=logging.CRITICAL) as cluster, distributed.Client(cluster) as client:
        with distributed.get_task_stream(client) as stream:
            rc, out, err = cli(capsys, "sweep", *TINY, "--backend", "dask", "--scheduler",
                               cluster.scheduler_address, "--cache", str(tmp_path / "c.jsonl"))
    assert rc == 2 and out == "" and one_line(err) and "memory_limit of worker" in err and "--scheduler" in err, err
    assert "less than a worker holds before its first point" in err and "give the workers more memory" in err, err
    assert stream.data == [] and not (tmp_path / "c.jsonl").exists()


def test_the_point_estimate_follows_the_measured_fit():
    # README "What a sweep costs": V = d = 1024, L = 64, N = 2^20 measured 779 MiB (fit: 381 + 4.6 B N L + 105 B V d)
    est = workers.point_bytes(lib.TaskConfig(V=1024, d=1024, L=64), 2 ** 20, 8192) / 2 ** 20
    assert 700 < est < 900
    assert workers.point_bytes(BASE, 2 ** 20, 256, "finite") > workers.point_bytes(BASE, 2 ** 20, 256)


# ----------------------------------------------------------------------------- code

def test_a_worker_with_other_code_refuses_and_the_sweep_says_so_in_one_line(capsys, tmp_path, monkeypatch,
                                                                             thread_cluster):
    """The task carries the client's code hash; the worker compares its own lib's and refuses: exit 2,
    one line naming the code, nothing stored. (The worker here runs in this process: the client's
    hash is made to differ, which is the same mismatch seen from the other side.)"""
    monkeypatch.setattr(engine, "code_hash", lambda part="points": "0123456789abcdef")
    cache = tmp_path / "c.jsonl"
    rc, out, err = cli(capsys, "sweep", *TINY, "--backend", "dask", "--scheduler", thread_cluster.scheduler_address,
                       "--cache", str(cache))
    assert rc == 2 and out == "" and one_line(err), err
    assert "code" in err and "differs from the sweep" in err and "0123456789abcdef" in err
    assert not cache.exists() or cache.read_text() == ""


@pytest.mark.slow
def test_a_cluster_left_without_workers_is_one_line_not_a_hang(tmp_path):
    """A cluster whose workers all died (or that never had one) used to leave the sweep waiting
    forever, silently; now it fails after --worker-wait seconds with one line naming --scheduler. The
    sweep runs in its own process under a deadline, so a regression fails here instead of hanging."""
    with distributed.LocalCluster(n_workers=0, processes=False, protocol="tcp://", host="127.0.0.1",
                                  dashboard_address=None, silence_logs=logging.CRITICAL) as cluster:
        addr = cluster.scheduler_address
        proc = subprocess.Popen([sys.executable, "-m", "lib", "sweep", *TINY, "--backend", "dask", "--scheduler", addr,
                                 "--worker-wait", "2", "--cache", str(tmp_path / "c.jsonl")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        try:
            out, err = proc.communicate(timeout=150)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail("the sweep still waited for a worker after 150 s")
    assert proc.returncode == 2 and out == "" and one_line(err), err
    assert f"--scheduler {addr}: the cluster has had no worker for 2 s" in err, err
    assert "0 of 1 grid points had finished" in err and "kept in" not in err, err   # nothing was kept
    rc = subprocess.run([sys.executable, "-m", "lib", "sweep", *TINY, "--worker-wait", "2"], capture_output=True,
                        text=True, env=ENV)
    assert rc.returncode == 2 and "--worker-wait" in rc.stderr and "needs --backend dask" in rc.stderr, rc.stderr


# ----------------------------------------------------------------------------- results stream

def _kind(kind):
    import time as time_
    if kind != "quick":
        time_.sleep(0.5 if kind == "fail" else 0.7)
    if kind == "fail":
        raise RuntimeError("boom")
    return kind


def test_points_that_finish_beside_a_failing_one_are_passed_on_first():
    """A failing task raises only after the points that finished beside it are passed on (they are in
    the store: the README says finished points are printed). Three tasks on three threads: the quick
    one is read, the caller dawdles, the failing one and the slow good one both finish meanwhile."""
    got = []
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=False, protocol="tcp://",
                                  host="127.0.0.1", dashboard_address=None, silence_logs=logging.CRITICAL) as cl:
        with pytest.raises(workers.ClusterError, match="boom; 2 of 3 grid points had finished"):
            for r in workers.dask_results(_kind, [("quick",), ("fail",), ("slowok",)], ["q", "f", "s"], [0] * 3, 1,
                                          cl.scheduler_address):
                got.append(r)
                if r == "quick":
                    time.sleep(2)
    assert got == ["quick", "slowok"]

def test_each_point_is_printed_as_it_finishes_and_kept_when_a_later_one_fails(capsys, tmp_path, monkeypatch):
    """--json prints JSON lines, one object per grid point, the moment it finishes: the second point
    failing leaves the first one printed (and in the cache), one error line, exit 2."""
    real = engine._one

    def second_fails(cfg, store, opts, parent=None):
        if cfg.d == 24:
            raise ValueError("d = 24: a failure of the second grid point")
        return real(cfg, store, opts, parent)
    monkeypatch.setattr(engine, "_one", second_fails)
    cache = tmp_path / "c.jsonl"
    rc, out, err = cli(capsys, "sweep", *TINY[:2], "--d", "32", "24", *TINY[4:], "--json", "--cache", str(cache))
    assert rc == 2 and one_line(err) and "second grid point" in err, err
    printed = [json.loads(line) for line in out.splitlines()]
    assert [p["d"] for p in printed] == [32] and printed[0]["nstar"] is not None
    assert len(Store(str(cache)).data) == 1


def test_on_point_sees_every_point_once(tmp_path):
    seen = []
    configs = engine.grid(BASE, d=[32, 24])
    points = engine.sweep(configs, on_point=lambda i, p: seen.append((i, p)), **FAST)
    assert sorted(i for i, _ in seen) == [0, 1] and [p for _, p in sorted(seen, key=lambda t: t[0])] == points


def test_progress_with_an_eta_by_default_on_a_terminal_only(capsys, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True
    rc, out, err = cli(capsys, "sweep", *TINY)
    assert rc == 0 and err == ""                                      # not a terminal: no bar
    term = Terminal()
    monkeypatch.setattr(sys, "stderr", term)
    assert main(["sweep", *TINY]) == 0
    bar = term.getvalue()
    assert "N* sweep" in bar and "1/1" in bar and "<" in bar, bar     # [elapsed<remaining]: the ETA
    term2 = Terminal()
    monkeypatch.setattr(sys, "stderr", term2)
    assert main(["sweep", *TINY, "--no-progress"]) == 0 and term2.getvalue() == ""


@pytest.mark.parametrize("command", ["train", "nstar", "sweep"])
def test_each_command_has_a_description_defaults_and_an_example(capsys, command):
    with pytest.raises(SystemExit) as exit_:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert "example" in out and f"python -m lib {command} --V" in out and "(default: 0)" in out   # --seed
    assert "status 2" in out and "130" in out
    if command == "sweep":
        assert "JSON lines" in " ".join(out.split()) and "--progress" in out


# ----------------------------------------------------------------------------- a cluster that goes away

def _read_lines(stream, into):
    for line in stream:
        into.append(line)


@pytest.mark.slow
def test_a_scheduler_dying_mid_sweep_is_one_line_and_keeps_finished_points(tmp_path):
    """A real `dask scheduler` and `dask worker`: the sweep streams the first grid point, then the
    scheduler is killed; the sweep exits 2 with one line naming --scheduler (it printed 58 lines of
    tracebacks, status 1), the finished point printed and its evaluated N's in the cache."""
    port = free_port()
    addr = f"tcp://127.0.0.1:{port}"
    bindir = os.path.dirname(sys.executable)
    sched = subprocess.Popen([os.path.join(bindir, "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port),
                              "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV,
                             start_new_session=True)
    worker = proc = None
    try:
        wait_listening(port, sched)
        worker = subprocess.Popen([os.path.join(bindir, "dask"), "worker", addr, "--nthreads", "1", "--nworkers", "1",
                                   "--no-dashboard"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV,
                                  start_new_session=True)
        cache = tmp_path / "c.jsonl"
        proc = subprocess.Popen([sys.executable, "-m", "lib", "sweep", *TWO, "--cache", str(cache), "--backend", "dask",
                                 "--scheduler", addr], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=ENV)
        out = []
        reader = threading.Thread(target=_read_lines, args=(proc.stdout, out), daemon=True)
        reader.start()
        deadline = time.time() + 180
        while not out and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert out, ("no point streamed", proc.poll(), proc.stderr.read() if proc.poll() is not None else "")
        os.killpg(sched.pid, signal.SIGKILL)
        err = proc.stderr.read()
        rc = proc.wait(60)
        reader.join(10)
    finally:
        for p in (proc, worker, sched):
            if p is not None and p.poll() is None:
                (p.kill if p is proc else lambda: os.killpg(p.pid, signal.SIGKILL))()
                p.wait(10)
    assert rc == 2 and one_line(err), (rc, err[-3000:])
    assert f"--scheduler {addr}" in err and "lost" in err and f"kept in {cache}" in err, err
    done = [json.loads(line)["d"] for line in out]
    assert done and set(done) < GRID_D and len(set(done)) == len(done)
    assert len(Store(str(cache)).data) >= 1


@pytest.mark.slow
def test_ctrl_c_with_dask_is_one_line_keeps_points_and_leaves_no_worker(tmp_path):
    """Ctrl-C in a terminal sends SIGINT to the whole process group, the cluster's workers included:
    the sweep prints one line and exits 130, what finished is printed and cached, and no worker is left."""
    cache = tmp_path / "c.jsonl"
    # a shell starts background jobs with SIGINT ignored and children inherit that (then Python never raises
    # KeyboardInterrupt): restore the default, as a terminal's foreground job has it
    proc = subprocess.Popen([sys.executable, "-m", "lib", "sweep", *TWO, "--cache", str(cache), "--backend", "dask",
                             "--jobs", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    out = []
    reader = threading.Thread(target=_read_lines, args=(proc.stdout, out), daemon=True)
    reader.start()
    try:
        deadline = time.time() + 180
        while not out and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        assert out and proc.poll() is None, ("no point streamed", proc.poll())
        rc, err, alive = ctrl_c_group(proc, 60)
        reader.join(10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert rc == 130 and err.strip().splitlines() == [
        f"python -m lib sweep: interrupted (finished points are kept in {cache})"], (rc, err[-3000:])
    done = [json.loads(line)["d"] for line in out]
    assert done and set(done) < GRID_D and len(set(done)) == len(done) and len(Store(str(cache)).data) >= 1
    assert not alive
