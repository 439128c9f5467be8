"""The job sandbox: a worker's command runs under a Landlock ruleset that lets it reach its own
files and the system, and nothing of the service's data directory (issue 43).

    python sandbox.py --rw PATH ... --ro PATH ... -- COMMAND...

Jobs run as the same OS user as the service, so without this a job reads the admin token, the
queues' tokens, `state.db` and every other job's logs and checkpoints. The launcher applies a
Landlock ruleset to itself (ctypes syscalls; `PR_SET_NO_NEW_PRIVS` first) and execs the
command, which keeps the ruleset with everything it starts. Landlock is an allow-list:

* read and write (`--rw`): the job's working directory, its job directory
  (`<data_dir>/jobs/<job id>/`: report, checkpoints, in-place resize files, its private TMPDIR),
  /dev/shm; read, write and ioctl the devices in `DEVICES` (GPUs, RDMA, /dev/null), not the
  disks;
* read and execute (`--ro`): the system (/usr, /lib*, /bin, /sbin, /etc, /opt, /run, /proc,
  /sys), the Python environment (prefixes, site-packages, PYTHONPATH), the files named on
  the command line, the directories of the Python scripts it names (their sibling modules)
  and the directories on its PATH (those clear of the data directory);
* nothing else: not the data directory, not another job's directory, not the user's home.

Since Landlock cannot carve a subdirectory out of an allowed one, a job for which an allowed
path holds the data directory (its working directory is the data directory or above it) is
refused with one line (`refusal`), not run with the directory in reach; a mount namespace
could hide it instead, but needs unprivileged user namespaces, which several distributions
disable. Landlock also denies ptrace of a less sandboxed process, so /proc/<service>/environ
and /mem are refused; with ABI >= 6 the job cannot signal a process outside its sandbox (the
service, another job). The job holds no capabilities, also when the service runs as root
(CAP_SYS_PTRACE would let it read /proc/<service>/environ all the same). Abstract unix sockets are not scoped: each rank is a sandbox of its
own and NCCL passes CUDA memory handles between a job's ranks over them; the service listens
on none. Run by path with no corral import, like ray/guard.py; stdlib and ctypes only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import pwd
import shutil
import site
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

__all__ = ["LAUNCHER", "abi", "available", "apply", "sandboxed", "refusal", "read_paths",
           "as_user", "become", "script_dirs",
           "SHARED_USER_EXPOSES"]

LAUNCHER = Path(__file__).resolve()
#: What running jobs unsandboxed exposes (`corral serve --allow-shared-user`).
SHARED_USER_EXPOSES = ("jobs run as the service's user with no sandbox, so any job can read "
                       "the service's data directory: the admin and queue tokens, state.db and "
                       "every job's logs and checkpoints")

# linux/landlock.h
_SYS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
EXECUTE, WRITE_FILE, READ_FILE, READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR = 1 << 4, 1 << 5, 1 << 6, 1 << 7
MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12
REFER, TRUNCATE, IOCTL_DEV = 1 << 13, 1 << 14, 1 << 15  # from ABI 2, 3, 5
SCOPE_ABSTRACT_UNIX_SOCKET, SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV  # all a file rule takes
_READ = EXECUTE | READ_FILE | READ_DIR
_ALL = (1 << 16) - 1
_DEV = _READ | WRITE_FILE | TRUNCATE | IOCTL_DEV
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_CAPABILITY_VERSION_3 = 0x20080522

#: Devices a job reads, writes and ioctls (GPUs, RDMA, /dev/null): not the disks.
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
           "/dev/ptmx", "/dev/pts", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
           "/dev/nvidia-modeset", "/dev/nvidia-caps", "/dev/dri", "/dev/infiniband", "/dev/kfd")

#: Read-only system paths every job gets (those that exist).
SYSTEM_PATHS = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt",
                "/run", "/proc", "/sys", "/nix", "/snap")


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def abi() -> int:
    """The kernel's Landlock ABI version; 0 where there is none (not Linux, not x86_64 or
    aarch64, Landlock not built in or not enabled)."""
    if sys.platform != "linux" or platform.machine() not in _SYS:
        return 0
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    got = libc.syscall(_SYS[platform.machine()][0], None, ctypes.c_size_t(0),
                       ctypes.c_uint32(_CREATE_RULESET_VERSION))
    return max(0, int(got))


def available() -> bool:
    """Can jobs be sandboxed here?"""
    return abi() >= 1


def _rights(version: int) -> int:
    """The filesystem access rights ABI `version` knows."""
    mask = _ALL
    if version < 2:
        mask &= ~REFER
    if version < 3:
        mask &= ~TRUNCATE
    if version < 5:
        mask &= ~IOCTL_DEV
    return mask


def devices() -> list[str]:
    """The device paths a job may use here (`DEVICES` and /dev/nvidia<N>)."""
    try:
        gpus = [f"/dev/{n}" for n in os.listdir("/dev") if n.startswith("nvidia") and n[6:].isdigit()]
    except OSError:
        gpus = []
    return [d for d in [*DEVICES, *sorted(gpus)] if os.path.exists(d)]


def drop_capabilities() -> None:
    """Give up every capability, for good: a job the service starts as root would otherwise
    keep CAP_SYS_PTRACE (which lets it read /proc/<service>/environ through Landlock),
    CAP_SYS_ADMIN, CAP_SYS_RAWIO and the rest. The bounding set is emptied first, so root
    regains none at exec (needs CAP_SETPCAP: a process without it has none to give up)."""
    libc = _libc()
    try:
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    except (OSError, ValueError):
        last = 63
    for cap in range(last + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # EPERM without CAP_SETPCAP: nothing held
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable; two words each
    if libc.capset(ctypes.byref(header), ctypes.byref(data)) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def apply(rw: Iterable[str], ro: Iterable[str], dev: Iterable[str] | None = None) -> int:
    """Restrict this process (and what it execs) to `rw` (every right), `ro` (read and execute)
    and `dev` (read, write, ioctl; default `devices()`), with no capabilities; paths that do not exist are skipped.
    Returns the ABI applied; raises OSError where Landlock is missing or refuses."""
    version = abi()
    if version < 1:
        raise OSError("Landlock is not available on this kernel")
    machine = platform.machine()
    create, add, restrict = _SYS[machine]
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    libc.prctl.restype = ctypes.c_int
    handled = _rights(version)
    attr = _RulesetAttr(handled, 0, SCOPE_SIGNAL if version >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if version >= 6 else 8  # net from ABI 4: not handled
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        for paths, access in ((rw, _ALL), (ro, _READ),
                              (devices() if dev is None else dev, _DEV)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue  # not here: nothing to allow
                try:
                    allowed = access & handled
                    if not os.path.isdir(path):
                        allowed &= _FILE_RIGHTS
                    rule = _PathBeneath(allowed, fd)
                    if libc.syscall(add, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH),
                                    ctypes.byref(rule), ctypes.c_uint32(0)) < 0:
                        raise OSError(ctypes.get_errno(), f"landlock_add_rule {path}")
                finally:
                    os.close(fd)
        drop_capabilities()
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
        if libc.syscall(restrict, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(ruleset)
    return version


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def read_paths(command: Sequence[str], env: Mapping[str, str]) -> list[str]:
    """What a job reads besides its own directories: the system, this Python environment
    (prefixes, site-packages, the job's PYTHONPATH, corral's own package and editable
    installs' sources) and the files its command names."""
    found = [p for p in SYSTEM_PATHS if os.path.exists(p)]
    found += [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              os.path.dirname(os.path.realpath(sys.executable))]
    found += [p for p in [*site.getsitepackages(), site.getusersitepackages()]
              if os.path.isdir(p)]
    found += [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.isabs(p)]
    found += [str(LAUNCHER.parents[2]), *_editable_roots()]  # corral itself, where installed
    found += [a for a in command if os.path.isabs(a) and os.path.isfile(a)]
    return list(dict.fromkeys(found))


def script_dirs(command: Sequence[str]) -> list[str]:
    """The directories of the Python scripts `command` names by absolute path: Python puts a
    script's directory first on its module path, so `python /x/train.py` imports its sibling
    `/x/common.py` from there, wherever the job's working directory is. Read only, and (in
    `sandboxed`) only where clear of the data directory: a script beside it keeps the file
    alone readable, and its sibling imports fail rather than the data directory opening."""
    return list(dict.fromkeys(os.path.dirname(a) for a in command
                              if os.path.isabs(a) and a.endswith(".py") and os.path.isfile(a)))


def _editable_roots() -> list[str]:
    """The source directories of packages installed editable (`pip install -e`): setuptools'
    import finders map each package to its directory outside site-packages (their module's
    MAPPING), so a job importing corral.train from such an install needs them."""
    roots: list[str] = []
    for finder in sys.meta_path:
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", ""), None), "MAPPING",
                          None)
        if isinstance(mapping, dict):
            roots += [os.path.dirname(p) for p in mapping.values()
                      if isinstance(p, str) and os.path.isabs(p)]
    return roots


def refusal(cwd: str, own: Sequence[str], ro: Sequence[str], deny: Sequence[str]) -> str | None:
    """Why the job cannot be sandboxed away from `deny` (one line), or None. Its working
    directory must not hold a denied directory nor lie in one (outside `own`, its job
    directory); a read path inside a denied directory is dropped by `sandboxed`, one holding
    it refuses the job."""
    real_deny = [os.path.realpath(d) for d in deny]
    real_own = [os.path.realpath(p) for p in own]
    for label, path in [("working directory", cwd), *(("path", p) for p in ro)]:
        real = os.path.realpath(path)
        for d in real_deny:
            if _inside(d, real):
                return (f"cannot sandbox the job: its {label} {path} holds the service's data "
                        f"directory {d}; submit it from a directory outside it (or move the "
                        "data directory: --data-dir)")
            if label == "working directory" and _inside(real, d) \
                    and not any(_inside(real, o) for o in real_own):
                return (f"cannot sandbox the job: its working directory {path} lies in the "
                        f"service's data directory {d}")
    return None


def _check_program(program: str, cwd: str, env: Mapping[str, str]) -> None:
    """Raise the OSError exec would (no such file, not executable), so a launch wrapped in the
    launcher fails to start as an unwrapped one does, not as a worker exiting 127."""
    if os.sep in program:
        path = os.path.join(cwd, program)
        if not os.path.isfile(path):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
        if not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), program)
    elif shutil.which(program, path=env.get("PATH", os.defpath)) is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)


def sandboxed(command: Sequence[str], *, cwd: str, job_dir: str, env: Mapping[str, str],
              deny: Sequence[str], python: str = sys.executable, run_as: str | None = None,
              landlock: bool = True) -> tuple[list[str], dict[str, str]]:
    """The argv and environment that run `command` in the sandbox: reading and writing `cwd`
    and `job_dir` (TMPDIR becomes `<job_dir>/tmp`), reading the system, and nothing of `deny`
    (the data directory, Ray's storage). Raises PermissionError with `refusal`'s line where
    that cannot hold. `run_as`: the job runs as that Unix user (the caller is root), which is
    given `job_dir`; `landlock` False: that alone, where the kernel has no Landlock."""
    _check_program(command[0], cwd, env)
    user = as_user(run_as, job_dir) if run_as is not None else None
    if not landlock:
        assert user is not None, "nothing to contain the job with"
        return ([python, "-I", str(LAUNCHER), "--user", user[0], "--no-landlock", "--",
                 *command], {**env, **user[1]})
    ro = read_paths(command, env)
    why = refusal(cwd, [job_dir], ro, deny)
    if why:
        raise PermissionError(why)
    real_deny = [os.path.realpath(d) for d in deny]
    ro += [d for d in script_dirs(command) if not any(
        _inside(os.path.realpath(d), x) or _inside(x, os.path.realpath(d)) for x in real_deny)]
    ro = [p for p in ro if not any(_inside(os.path.realpath(p), d) for d in real_deny)]
    ro += [p for p in env.get("PATH", "").split(os.pathsep)  # its programs, where harmless
           if os.path.isabs(p) and os.path.isdir(p) and not any(
               _inside(os.path.realpath(p), d) or _inside(d, os.path.realpath(p))
               for d in real_deny)]
    tmp = os.path.join(job_dir, "tmp")
    os.makedirs(tmp, exist_ok=True)
    argv = [python, "-I", str(LAUNCHER)]
    for p in (cwd, job_dir, "/dev/shm"):
        argv += ["--rw", p]
    for p in ro:
        argv += ["--ro", p]
    if user is not None:
        os.chown(tmp, *user[2])
        argv += ["--user", user[0]]
    return [*argv, "--", *command], {**env, "TMPDIR": tmp, **(user[1] if user else {})}


def as_user(name: str, job_dir: str) -> tuple[str, dict[str, str], tuple[int, int]]:
    """(name, its login environment, (uid, gid)) for a job run as `name`, whose job directory
    (and everything in it) is given to it; PermissionError (one line) for an unknown user."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise PermissionError(f"run_as user {name!r} does not exist on this machine") from None
    ids = (entry.pw_uid, entry.pw_gid)
    for root, dirs, files in os.walk(job_dir):
        for entry_name in (*dirs, *files):
            os.lchown(os.path.join(root, entry_name), *ids)
    os.chown(job_dir, *ids)
    return name, {"HOME": entry.pw_dir, "USER": name, "LOGNAME": name}, ids


def become(name: str) -> None:
    """Take user `name`'s uid, gid and groups for good (the launcher runs as root): what it
    execs then holds no capability, and files the service keeps 0600 are closed to it."""
    entry = pwd.getpwnam(name)
    os.setgroups(os.getgrouplist(name, entry.pw_gid))
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)


def main(argv: list[str]) -> int:
    """`--rw P`, `--ro P` (repeatable), `--`, the command: apply the ruleset and exec."""
    usage = ("usage: sandbox.py [--rw PATH] [--ro PATH] ... [--user NAME [--no-landlock]] -- "
             "COMMAND...\n")
    rw: list[str] = []
    ro: list[str] = []
    user, landlock = None, True
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] == "--no-landlock":
            landlock, i = False, i + 1
            continue
        if argv[i] not in ("--rw", "--ro", "--user") or i + 1 >= len(argv):
            sys.stderr.write(usage)
            return 2
        if argv[i] == "--user":
            user = argv[i + 1]
        else:
            (rw if argv[i] == "--rw" else ro).append(argv[i + 1])
        i += 2
    command = argv[i + 1:]
    if not command or (not landlock and user is None):
        sys.stderr.write(usage)
        return 2
    try:
        if user is not None:
            become(user)  # first: setuid needs the capabilities `apply` gives up
        if landlock:
            apply(rw, ro)
    except (OSError, KeyError) as exc:
        sys.stderr.write(f"corral sandbox: cannot restrict the job: {exc}\n")
        return 126
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        sys.stderr.write(f"cannot start {command[0]!r}: {exc.strerror or exc}\n")
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
