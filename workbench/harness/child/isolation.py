"""OS-level isolation of a process that runs candidates: no network, the file system read-only but for a private
directory and the kernel caches, no capabilities, and a CPU-time limit.

Applied once, at the start of a worker (and of the ncu driver), before any candidate or problem file is imported.
It uses Linux namespaces directly (`unshare(2)`, `mount(2)` through libc), so it needs no tool on the machine and
leaves CUDA alone: device nodes stay writable on a read-only mount (the kernel never refuses a write to a character
device for the mount's sake), NVML reads /proc and /dev only, and the driver's files are read, not written.

- network: a new network namespace holds only a loopback interface that is down; every connect fails.
- files: a new mount namespace in which every mount is remounted read-only, then the worker's own directory (its
  captured output and, on a size-limited tmpfs, its TMPDIR) and the Triton, Inductor and CUDA kernel caches are bound
  writable again. The parent sees none of this; the tmpfs vanishes with the process.
- privileges: every capability is dropped (bounding set too), so a candidate cannot undo the mounts, and
  no-new-privileges keeps a set-uid program from giving them back.
- CPU time: `RLIMIT_CPU` is raised per task by the worker (`allow_cpu_seconds`), so a spinning candidate is killed
  by the kernel even when the parent's wall-clock timeout is long.

Where a step is refused (not Linux, a container without the privilege, gVisor), `apply` raises `IsolationUnavailable`
with the reason, and the caller carries on with the static stage as the only barrier and says so once.

On a GPU the isolation must not break CUDA, NVML or Triton, and what they need differs between machines (a
virtualised kernel may refuse a device opened on a read-only mount, a driver may need a capability). So a GPU
worker's level is chosen by trying them, strongest first (`LEVELS`), in a throwaway process that isolates itself
exactly as a worker does and then creates a CUDA context, pins host memory, asks NVML and runs a Triton kernel
(`python -m workbench.harness.child.isolation --probe LEVEL DIR`); the first level that works is kept for the
machine (devices.worker caches it) and reported with the reasons the stronger ones failed. /dev is never remounted
(device nodes must open as they do outside); its shared memory is a fresh tmpfs.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
from pathlib import Path

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWUSER = 0x00020000, 0x40000000, 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME, MS_STRICTATIME = 1 << 18, 1 << 21, 1 << 24
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 24, 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_MOUNT_FLAGS = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
                "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}
TMPFS_SIZE = "4g"  # the private TMPDIR: compilers' temporary files, a candidate's scratch; bounded, in memory
MAX_FILE_BYTES = 1 << 30  # no single file a worker writes (its output log included) grows past this


class IsolationUnavailable(RuntimeError):
    """The OS refused a step of the isolation; the message says which and why."""


def _libc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c")
    if not name or not hasattr(os, "uname") or os.uname().sysname != "Linux":
        raise IsolationUnavailable("not a Linux machine: namespaces are Linux's")
    return ctypes.CDLL(name, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise IsolationUnavailable(f"{what} refused: {os.strerror(err)} (errno {err})")


def _unescape(field: str) -> str:
    """/proc/self/mountinfo writes a space in a path as \\040 (octal escapes)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _mounts() -> list[tuple[str, int]]:
    """(mount point, its per-mount flags) for every mount this process sees, parents before children."""
    rows = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        flags = 0
        for opt in fields[5].split(","):
            flags |= _MOUNT_FLAGS.get(opt, 0)
        rows.append((_unescape(fields[4]), flags))
    return rows


def _enter_namespaces(libc: ctypes.CDLL, network: bool) -> None:
    flags = CLONE_NEWNS | (CLONE_NEWNET if network else 0)
    if libc.unshare(flags) == 0:
        return
    # Not root: a user namespace gives the privilege inside it, the same user id mapped to itself.
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(CLONE_NEWUSER | flags), "unshare (mount, network and user namespaces)")
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


def _enc(s: str | None) -> bytes | None:
    return s.encode() if s is not None else None


def _mount(libc: ctypes.CDLL, src: str | None, target: str, fstype: str | None, flags: int, data: str | None,
           what: str) -> None:
    _check(libc.mount(_enc(src), _enc(target), _enc(fstype), ctypes.c_ulong(flags), _enc(data)), f"{what} ({target})")


def _drop_capabilities(libc: ctypes.CDLL) -> None:
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    for cap in range(64):  # the bounding set: what an exec could give back; EINVAL past the kernel's last cap
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable, twice (64 capability bits): all zero
    _check(libc.capset(header, data), "capset (dropping capabilities)")
    _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(no_new_privs)")


def writable_caches() -> list[Path]:
    """The kernel caches a worker must keep writing, shared across workers and runs as before isolation."""
    home = Path.home()
    triton = Path(os.environ.get("TRITON_CACHE_DIR") or Path(os.environ.get("TRITON_HOME") or home) / ".triton")
    inductor = Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])  # pinned by the parent (see worker.isolation_env)
    cuda = Path(os.environ.get("CUDA_CACHE_PATH") or home / ".nv")
    return [triton, inductor, cuda]


# Strongest first: (name, network namespace, read-only files, capabilities dropped).
LEVELS = (("full", True, True, True), ("files", True, True, False), ("network", True, False, False))
LEVEL_NAMES = tuple(name for name, *_ in LEVELS) + ("none",)


def apply_level(level: str, private_dir: str | Path, extra_writable: tuple[str, ...] = ()) -> dict[str, str]:
    """Isolate this process at one of `LEVELS` ("none" does nothing)."""
    for name, network, files, drop in LEVELS:
        if name == level:
            return {"level": level, **apply(private_dir, network=network, files=files, drop_capabilities=drop,
                                            extra_writable=extra_writable)}
    if level == "none":
        return {"level": "none"}
    raise ValueError(f"unknown isolation level {level!r} (one of {LEVEL_NAMES})")


def apply(private_dir: str | Path, network: bool = True, drop_capabilities: bool = True,
          files: bool = True, extra_writable: tuple[str, ...] = ()) -> dict[str, str]:
    """Isolate this process (see the module docstring). `private_dir` exists and is the worker's own; its `tmp/`
    becomes a private tmpfs. `network`, `files` (the read-only mounts) and `drop_capabilities` turn steps off for a
    machine whose GPU stack needs them off; `extra_writable` names more directories left writable. Returns a short
    description of what holds."""
    libc = _libc()
    private = Path(private_dir)
    caches = writable_caches()
    for d in caches + [private / "tmp"]:
        d.mkdir(parents=True, exist_ok=True)
    if not files:
        if network:
            _check(libc.unshare(CLONE_NEWNET), "unshare (network namespace)")
        resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
        if drop_capabilities:
            _drop_capabilities(libc)
        return {"network": "none (empty network namespace)" if network else "as the host's",
                "files": "as the host's (writable)", "capabilities": "none" if drop_capabilities else "kept",
                "max_file_bytes": str(MAX_FILE_BYTES)}
    _enter_namespaces(libc, network)
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE, None, "making mounts private")
    keep = [private, *caches, *(Path(p) for p in extra_writable)]
    for d in keep:  # a bind of each writable place onto itself: its own mount, left writable below
        _mount(libc, str(d), str(d), None, MS_BIND | MS_REC, None, "binding a writable directory")
    kept = {str(d.resolve()) for d in keep}
    for point, flags in _mounts():
        if point in kept or point == "/dev" or point.startswith("/dev/"):
            continue  # /dev stays as it is: a device opened on a read-only mount is refused by some kernels
        try:
            _mount(libc, None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | flags, None, "remounting read-only")
        except IsolationUnavailable:
            if point == "/":
                raise
            # a mount we may not touch (a locked mount of a parent namespace): it stays as it was, reported
    for d in keep:  # a bind inherits the read-only flag of its source's mount: clear it on ours
        _mount(libc, None, str(d), None, MS_REMOUNT | MS_BIND, None, "remounting a writable directory")
    _mount(libc, "tmpfs", str(private / "tmp"), "tmpfs", MS_NOSUID | MS_NODEV, f"size={TMPFS_SIZE},mode=700",
           "mounting the private tmpfs")
    if Path("/dev/shm").is_dir():  # shared memory is a writable place too: a fresh, empty one
        _mount(libc, "tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={TMPFS_SIZE}", "private /dev/shm")
    resource.setrlimit(resource.RLIMIT_FSIZE, (MAX_FILE_BYTES, MAX_FILE_BYTES))
    if drop_capabilities:
        _drop_capabilities(libc)
    return {"network": "none (empty network namespace)" if network else "as the host's",
            "files": "read-only except " + ", ".join(str(d) for d in keep),
            "capabilities": "none" if drop_capabilities else "kept", "max_file_bytes": str(MAX_FILE_BYTES)}


def allow_cpu_seconds(seconds: float) -> None:
    """Let this process use `seconds` more CPU time (all threads) before the kernel kills it with SIGXCPU."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    total = used.ru_utime + used.ru_stime
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(total + seconds) + 1
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))


def _probe_gpu_stack() -> None:
    """What a GPU worker does with the GPU, each step once: a CUDA context and a kernel, pinned host memory, NVML,
    and a Triton kernel compiled (ptxas, the kernel cache) and run."""
    import torch

    x = torch.arange(4096, device="cuda", dtype=torch.float32)
    assert float((x * 2).sum()) == 2 * float(x.sum())
    torch.empty(1 << 20, dtype=torch.uint8, pin_memory=True).fill_(1)
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        pynvml.nvmlInit()
        pynvml.nvmlSystemGetDriverVersion()
    import triton
    import triton.language as tl

    @triton.jit
    def _double(p, n, BLOCK: tl.constexpr):
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(p + i, tl.load(p + i, mask=i < n) * 2, mask=i < n)

    _double[(4,)](x, 4096, BLOCK=1024)
    torch.cuda.synchronize()
    assert float(x[1]) == 2.0


def init_cuda() -> None:
    """Create the CUDA context before isolating (the driver opens its device files outside the new namespaces)."""
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 4 or sys.argv[1] != "--probe":
        sys.exit("usage: python -m workbench.harness.child.isolation --probe LEVEL PRIVATE_DIR")
    init_cuda()
    apply_level(sys.argv[2], sys.argv[3])
    _probe_gpu_stack()
    print("ok")
