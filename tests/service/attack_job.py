"""A team's job that tries to reach what is not its own (issue 43): run as
`attack_job.py DATA_DIR VICTIM_JOB [PATHS_FILE]` under `corral serve --queues`.

It tries to read the admin token, the other team's token, state.db, the victim job's log and
checkpoint, the service's /proc environ, and every file PATHS_FILE lists (one path per line:
the whole data directory, listed from outside, since the sandbox also refuses listing it), and
to signal the service. Each attempt prints `ATTEMPT ["what", "ok" | errno name]`. Then it
writes its own checkpoint and crashes; its retry finds the checkpoint, prints `resumed ...`
and exits 0 (its own files stay its own)."""

import errno
import json
import os
import sys

data, victim = sys.argv[1], sys.argv[2]
ckpt = os.path.join(os.environ["CORRAL_CHECKPOINT_DIR"], "state.json")
if os.path.exists(ckpt):  # the retry: resume from its own checkpoint
    print("resumed " + open(ckpt).read(), flush=True)
    sys.exit(0)


def attempt(name, do):
    try:
        do()
        got = "ok"
    except OSError as exc:
        got = errno.errorcode.get(exc.errno, str(exc.errno))
    print("ATTEMPT " + json.dumps([name, got]), flush=True)


def read(path):
    return lambda: open(path, "rb").read()


service = os.getppid()
attempt("admin token", read(os.path.join(data, "token")))
attempt("vision token", read(os.path.join(data, "tokens", "vision")))
attempt("state.db", read(os.path.join(data, "state.db")))
attempt("vision log", read(os.path.join(data, "jobs", victim, "job.log")))
attempt("vision checkpoint", read(os.path.join(data, "jobs", victim, "checkpoints", "vision.pt")))
attempt("service environ", read(f"/proc/{service}/environ"))
attempt("signal service", lambda: os.kill(service, 0))
attempt("list the data directory", lambda: os.listdir(data))
if len(sys.argv) > 3:
    for line in open(sys.argv[3]):
        path = line.strip()
        if path:
            attempt("data file " + os.path.relpath(path, data), read(path))
with open(ckpt + ".tmp", "w") as f:
    f.write(json.dumps({"step": 7}))
os.replace(ckpt + ".tmp", ckpt)
sys.exit(1)  # a crash: the retry must resume from the checkpoint just written
