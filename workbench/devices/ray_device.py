"""A Ray device: the ladder's stages spread over the GPUs (or CPUs) of a Ray cluster, behind LocalDevice's interface.

Each pool actor owns one `LocalDevice`, whose compile and device worker processes stay warm between calls. On kind
"cuda" an actor holds `num_gpus_per_task` GPUs; Ray sets its CUDA_VISIBLE_DEVICES, so the LocalDevice's GPU 0 is the
GPU Ray assigned (and the per-GPU file lock still serialises it against local runs on that machine). The compile stage
then runs on a separate pool of CPU actors, so compiling never holds a GPU. On kind "cpu" the same CPU actors do
both, and timing is refused exactly as LocalDevice refuses it (a LocalDevice answers).

Actors only compute: records come back to the driver, which alone writes the store (the Ladder does). Candidate and
problem files travel as text and are rewritten on an actor's node when its filesystem lacks them.

Failures. The LocalDevice in an actor already kills a hung candidate at the stage timeout ("timed out: ..."). As a
backstop, a call with no answer after its stage timeouts plus `grace_s` is given up: the actor is killed (ray.cancel
cannot stop a running actor method) and replaced, and the stage fails "timed out". An actor or node that dies fails
the stage it was running with "lost worker: <which error>"; the actor is replaced and the other calls go on. Actors
that cannot be scheduled within `start_timeout` (the cluster is full) are given up at start; the device starts with
the others and fails only when none started.

Sharing a cluster. Without `workers`, a device sizes its pools to the whole cluster, so two devices on one cluster
would each ask for every GPU (or CPU) and their actors would wait for each other. $WORKBENCH_RAY_SHARE=N (an integer
>= 1; a sweep sets it to the number of its runs that use Ray at once) makes a device take 1/N of it: on kind "cuda"
max(1, GPUs // num_gpus_per_task // N) eval actors and at most CPUs // N CPUs in all (eval actors included) for
its compile actors; on kind "cpu" max(1, CPUs // N) actors. Explicit `workers` / `compile_workers` are used as given.
"""
from __future__ import annotations

import hashlib
import os
import socket
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import HARNESS_VERSION
from ..core import paths
from ..core.records import FAIL, TIMING_STAGES, StageRecord
from ..problems.problem import Problem
from .local import DEFAULT_TIMEOUTS, LocalDevice, NoGPUError

# Ray errors that mean the actor, its worker process or its node is gone (looked up by name: they vary by version).
LOST_ERRORS = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "WorkerCrashedError", "NodeDiedError",
               "ObjectLostError", "OwnerDiedError", "ObjectReconstructionFailedError", "OutOfMemoryError",
               "LocalRayletDiedError", "TaskCancelledError", "ActorUnschedulableError")


def _ray():
    try:
        import ray
    except ImportError as e:
        raise ImportError("the Ray device needs ray: pip install 'workbench[ray]'") from e
    return ray


def resolve_address(address: str | None = None) -> str | None:
    """The cluster to join: the argument, else $WORKBENCH_RAY_ADDRESS, else $RAY_ADDRESS; None starts a local one."""
    return address or os.environ.get("WORKBENCH_RAY_ADDRESS") or os.environ.get("RAY_ADDRESS") or None


def ray_share() -> int:
    """$WORKBENCH_RAY_SHARE: how many devices share the cluster at once (1 when unset)."""
    raw = os.environ.get("WORKBENCH_RAY_SHARE", "").strip()
    try:
        share = int(raw or 1)
    except ValueError:
        share = 0
    if share < 1:
        raise ValueError(f"WORKBENCH_RAY_SHARE must be an integer >= 1, got {raw!r}")
    return share


def _short(e: BaseException, n: int = 300) -> str:
    lines = [line for line in str(e).strip().splitlines() if line.strip()]
    return (lines[0] if lines else type(e).__name__)[:n]


def _failed(stage: str, reason: str, wall: float, on_gpu: bool, why: str) -> StageRecord:
    # a failure of the cluster, not of the candidate: worth retrying elsewhere, never reused from a store
    return StageRecord(stage, FAIL, reason, wall, wall if on_gpu else 0.0, executor_failure=why)


class _Evaluator:
    """Actor body (wrapped with ray.remote at run time, so importing this module does not need ray)."""

    def __init__(self, kind: str, timeouts: dict[str, float]):
        self.dev = LocalDevice(kind, 0, timeouts)
        self.files = paths.ray_files_dir()
        import ray

        self.node, self.host = ray.get_runtime_context().get_node_id(), socket.gethostname()

    def ready(self, warm_device: bool, warm_compile: bool) -> dict[str, Any]:
        """Start the workers this actor will use, so the first evaluation does not pay for it."""
        if warm_compile:
            self.dev.compile_worker.start()
        out: dict[str, Any] = {"node": self.node, "host": self.host, "pid": os.getpid()}
        if warm_device:
            out.update(info=dict(self.dev.info), name=self.dev.name, gpu_name=self.dev.gpu_name,
                       provenance=self.dev.provenance())
        return out

    def _local(self, path: str, text: str) -> str:
        p = Path(path)
        try:
            if p.read_text() == text:
                return path
        except OSError:
            pass
        d = self.files / hashlib.sha256(text.encode()).hexdigest()[:16]
        d.mkdir(parents=True, exist_ok=True)
        q = d / p.name  # same file name: a problem's name is its file stem
        if not q.exists():
            fd, tmp = tempfile.mkstemp(dir=d, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                f.write(text)
            os.replace(tmp, q)  # atomic: actors on one node may write it at once
        return str(q)

    def _stamp(self, records: list[StageRecord]) -> list[StageRecord]:
        for r in records:  # which node ran it goes into the stored stage data
            r.data = {**r.data, "ray_node": self.node, "ray_host": self.host}
        return records

    def compile(self, spec: tuple, cand: tuple[str, str]) -> list[StageRecord]:
        return self._stamp([self.dev.compile(Problem(self._local(spec[0], spec[1]), *spec[2:]), self._local(*cand))])

    def run_stages(self, spec: tuple, cand: tuple[str, str], stages: list[str],
                   options: dict[str, Any]) -> list[StageRecord]:
        problem = Problem(self._local(spec[0], spec[1]), *spec[2:])
        return self._stamp(self.dev.run_stages(problem, self._local(*cand), stages, options))

    def close(self) -> None:
        self.dev.close()


class _Pool:
    """Actors serving one call at a time each; a dead, killed or hung actor is replaced in its slot."""

    def __init__(self, ray, make: Callable[[], Any], size: int, start_timeout: float, warm: tuple[bool, bool]):
        self.ray, self.make, self.start_timeout, self.warm = ray, make, start_timeout, warm
        self.cond = threading.Condition()
        self.actors: list[Any] = [None] * size
        self.meta: dict[int, dict[str, Any]] = {}
        self.idle: list[int] = []
        self.live = size  # slots whose actor is ready or starting
        self.errors: list[str] = []
        self.replaced = 0
        refs = [self._spawn(i) for i in range(size)]
        deadline = time.monotonic() + start_timeout  # one deadline for all: they start in parallel
        for i, ref in enumerate(refs):
            self._await(i, self.actors[i], ref, max(1.0, deadline - time.monotonic()))
        if not self.live:
            raise RuntimeError("no Ray actor started: " + "; ".join(self.errors))

    def _spawn(self, i: int):
        self.actors[i] = self.make()
        return self.actors[i].ready.remote(*self.warm)

    def _await(self, i: int, actor, ref, timeout: float | None = None) -> None:
        try:
            meta = self.ray.get(ref, timeout=timeout or self.start_timeout)
        except Exception as e:  # unschedulable (e.g. its node is gone) or failed to start: the slot is given up
            _kill(self.ray, actor)
            with self.cond:
                self.live -= 1
                self.errors.append(f"{type(e).__name__}: {_short(e)}")
                self.cond.notify_all()
            return
        with self.cond:
            self.meta[i] = meta
            self.idle.append(i)
            self.cond.notify_all()

    def checkout(self) -> tuple[int, Any] | None:
        with self.cond:
            while not self.idle:
                if self.live == 0:
                    return None
                self.cond.wait()
            i = self.idle.pop(0)
            return i, self.actors[i]

    def checkin(self, i: int) -> None:
        with self.cond:
            self.idle.append(i)
            self.cond.notify_all()

    def replace(self, i: int) -> None:
        """Called by the holder of slot i: kill its actor and start another in the background."""
        _kill(self.ray, self.actors[i])
        with self.cond:
            self.meta.pop(i, None)
            self.replaced += 1
        ref = self._spawn(i)
        threading.Thread(target=self._await, args=(i, self.actors[i], ref), daemon=True).start()

    def close(self) -> None:
        with self.cond:  # idle actors stop their workers cleanly; busy or starting ones are just killed
            refs = [self.actors[i].close.remote() for i in self.idle]
            self.idle, self.live = [], 0
        try:
            self.ray.wait(refs, num_returns=len(refs), timeout=10)
        except Exception:
            pass
        for a in self.actors:
            _kill(self.ray, a)


def _kill(ray, actor) -> None:
    try:
        ray.kill(actor, no_restart=True)
    except Exception:
        pass


class RayDevice:
    """kind 'cuda' (one actor per `num_gpus_per_task` GPUs of the cluster), 'cpu' (one actor per CPU), or 'local'
    (cuda when the cluster has a GPU, else cpu: what `local` means for one machine, `devices.resolve`)."""

    def __init__(self, address: str | None = None, kind: str = "cuda", timeouts: dict[str, float] | None = None,
                 num_gpus_per_task: float = 1, workers: int | None = None, compile_workers: int | None = None,
                 grace_s: float = 60.0, start_timeout: float = 300.0, actor_options: dict[str, Any] | None = None):
        if kind not in ("cuda", "cpu", "local"):
            raise ValueError(f"unknown device kind '{kind}'")
        ray = self._ray = _ray()
        self.grace_s = grace_s
        self.timeouts = {**DEFAULT_TIMEOUTS, **(timeouts or {})}
        self.address = resolve_address(address)
        share = ray_share()  # read (and refused when malformed) before joining or starting a cluster
        self._owns_ray = not ray.is_initialized()
        if self._owns_ray and self.address:
            ray.init(address=self.address)
        elif self._owns_ray:  # a local cluster sized to this machine (Ray counts its CPUs and GPUs)
            ray.init(include_dashboard=False)
        res = ray.cluster_resources()
        if kind == "local":  # the GPUs when the cluster has any, else the CPUs
            kind = "cuda" if res.get("GPU", 0) > 0 else "cpu"
        self.kind = kind
        actor = ray.remote(_Evaluator)
        opts = dict(actor_options or {})  # e.g. {"accelerator_type": "H200"} or {"resources": {...}}
        # this device's part of the cluster: concurrent devices that each asked for all of it would deadlock
        cpus = int(res.get("CPU", 1)) // share
        if kind == "cuda":
            n = workers or int(res.get("GPU", 0) // num_gpus_per_task)
            if n < 1:
                raise NoGPUError(f"the Ray cluster has no GPU ({res.get('GPU', 0)} GPUs for {num_gpus_per_task} "
                                 "per actor): use kind 'cpu' for static, compile and interpreter correctness")
            n = workers or max(1, n // share)
            ncomp = compile_workers or max(1, min(cpus - n, 10 * n))  # ~10 compile CPUs per GPU
            eval_opts = {"num_cpus": 1, "num_gpus": num_gpus_per_task, **opts}
        else:
            n = workers or max(1, cpus)
            eval_opts = {"num_cpus": 1, **opts}
        timeouts_ = self.timeouts
        self._pool = _Pool(ray, lambda: actor.options(**eval_opts).remote(kind, timeouts_), n, start_timeout,
                           (True, kind == "cpu"))
        self._compile_pool = self._pool if kind == "cpu" else _Pool(
            ray, lambda: actor.options(num_cpus=1).remote("cpu", timeouts_), ncomp, start_timeout, (False, True))
        names = {m["name"] for m in self._pool.meta.values()}
        if len(names) > 1:
            self.close()
            raise ValueError(f"the pool mixes devices {sorted(names)}: select one with actor_options, e.g. "
                             "{'accelerator_type': ...}, so that stored results name one device")
        # the identity is fixed at start: a pool that later loses actors must not rename the device in the store
        self._identity = self._pool.meta[min(self._pool.meta)]
        self._running: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()

    # ---- identity and provenance: those of the pool's LocalDevices, plus where they run ----
    @property
    def info(self) -> dict[str, Any]:
        return {**self._identity["info"], "executor": "ray", "workers": len(self._pool.actors)}

    @property
    def slots(self) -> int:
        """Evaluations that run at once (the pool's actors): a search measures that many of a step together."""
        return len(self._pool.actors)

    def ready_slots(self) -> int:
        """Actors started and serving now (a replaced actor counts again once its workers are up)."""
        with self._pool.cond:
            return len(self._pool.meta)

    @property
    def name(self) -> str:
        return self._identity["name"]

    @property
    def gpu_name(self) -> str | None:
        return self._identity["gpu_name"]

    def provenance(self) -> dict[str, Any]:
        with self._pool.cond:
            nodes = sorted({m["node"] for m in self._pool.meta.values()})
        return {"device": self.name, "harness_version": HARNESS_VERSION, **self._identity["provenance"],
                "executor": "ray", "ray_address": self.address or "local", "ray_nodes": nodes}

    def running(self) -> list[dict[str, Any]]:
        """Calls in flight: actor handle, method, candidate path, start time."""
        with self._lock:
            return list(self._running.values())

    def close(self) -> None:
        self._pool.close()
        if self._compile_pool is not self._pool:
            self._compile_pool.close()
        if self._owns_ray:
            self._ray.shutdown()

    # ---- stages ----
    def compile(self, problem: Problem, cand_path: str | Path) -> StageRecord:
        return self._call(self._compile_pool, "compile", problem, cand_path, (), "compile",
                          self.timeouts["compile"], on_gpu=False)[0]

    def run_stages(self, problem: Problem, cand_path: str | Path, stages: list[str],
                   options: dict[str, Any] | None = None) -> list[StageRecord]:
        run = [s for s in stages if not (self.kind == "cpu" and s in TIMING_STAGES)] or list(stages)
        timeout = sum(self.timeouts.get(s, 300.0) for s in run)
        return self._call(self._pool, "run_stages", problem, cand_path, (list(stages), options or {}), run[0],
                          timeout, on_gpu=self.kind == "cuda")

    def map_stages(self, problem: Problem, items: list[tuple]) -> list[list[StageRecord]]:
        """Run (cand_path, stages[, options]) items concurrently over the pool; results in input order."""
        calls = [lambda it=it: self.run_stages(problem, *it) for it in items]
        return self._fan(calls, [it[1][0] if it[1] else "correctness" for it in items])

    def map_compile(self, problem: Problem, cand_paths: Sequence[str | Path], workers: int = 2) -> list[StageRecord]:
        """Compile on the cluster's CPU actors (`workers` is the local devices' knob: the pool is sized here)."""
        calls = [lambda p=p: [self.compile(problem, p)] for p in cand_paths]
        return [r[0] for r in self._fan(calls, ["compile"] * len(cand_paths), self._compile_pool)]

    def _fan(self, calls: list[Callable[[], list[StageRecord]]], blame: list[str],
             pool: _Pool | None = None) -> list[list[StageRecord]]:
        # One driver thread per actor: each blocks in ray.get, so every actor is kept busy. A call that fails in
        # the driver fails alone; every answer that came back is returned.
        with ThreadPoolExecutor(max(1, len((pool or self._pool).actors))) as ex:
            futures = [ex.submit(c) for c in calls]
        out = []
        for f, stage in zip(futures, blame):
            try:
                out.append(f.result())
            except Exception as e:
                reason = f"driver error: {type(e).__name__}: {_short(e)}"
                out.append([_failed(stage, reason, 0.0, False, "driver_error")])
        return out

    def _call(self, pool: _Pool, method: str, problem: Problem, cand_path: str | Path, extra: tuple, stage: str,
              timeout: float, on_gpu: bool) -> list[StageRecord]:
        ray = self._ray
        spec = (problem.path, Path(problem.path).read_text(), problem.overrides, problem.precision)
        cand = (str(cand_path), Path(cand_path).read_text())
        slot = pool.checkout()
        if slot is None:
            return [_failed(stage, "lost worker: no Ray actor left in the pool (" + "; ".join(pool.errors[-3:]) + ")",
                            0.0, False, "lost_worker")]
        i, actor = slot
        t0 = time.perf_counter()
        ref = getattr(actor, method).remote(spec, cand, *extra)
        with self._lock:
            self._running[id(ref)] = {"actor": actor, "method": method, "cand_path": str(cand_path), "since": t0}
        try:
            out = ray.get(ref, timeout=timeout + self.grace_s)
        except Exception as e:
            wall = time.perf_counter() - t0
            if isinstance(e, ray.exceptions.GetTimeoutError):
                pool.replace(i)
                return [_failed(stage, f"timed out: no answer from the Ray actor within {timeout + self.grace_s:.0f} "
                                       "s; actor killed and replaced", wall, on_gpu, "timeout")]
            lost = any(c.__name__ in LOST_ERRORS for c in type(e).__mro__)
            fresh = lost or not isinstance(e, ray.exceptions.RayTaskError)
            if fresh:
                pool.replace(i)  # the actor is gone or in an unknown state: start another
            else:
                pool.checkin(i)  # the method itself raised (a harness bug); the actor is fine
            what = "lost worker" if lost else "worker error"
            reason = f"{what}: {type(e).__name__}: {_short(e)}" + ("; actor replaced" if fresh else "")
            return [_failed(stage, reason, wall, on_gpu, what.replace(" ", "_"))]
        finally:
            with self._lock:
                self._running.pop(id(ref), None)
        pool.checkin(i)
        return out
