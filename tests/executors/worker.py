"""A torch-free worker for the executor contract tests: `python worker.py MODE [STEPS]`.

Every worker appends a JSON line describing its environment to $CORRAL_CHECKPOINT_DIR/env.jsonl.
Modes:
  finish      exit 0 at once
  count       count STEPS steps of 20 ms (rank 0 keeps the count in a checkpoint file); on
              SIGTERM save the count and exit 143; resume from the saved count on start
  crash-once  exit 3 on the first launch, then behave like `count`
  crash       always exit 3
  die-rank1   rank 1 kills itself with SIGKILL on the first launch, once rank 0 has started;
              then `count`
  sleep       sleep until signalled (SIGTERM exits 143)
  held        like `count`, but it counts on past STEPS while $CORRAL_CHECKPOINT_DIR/hold exists
              (a test decides when it may finish, however slowly a loaded machine runs it)
"""

import json
import os
import signal
import sys
import time

mode = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
ckpt = os.environ["CORRAL_CHECKPOINT_DIR"]
rank = int(os.environ["RANK"])
config = json.loads(os.environ["CORRAL_JOB_CONFIG"])
launch = config["launch"]
keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "CORRAL_JOB_ID", "CORRAL_CHECKPOINT_DIR", "CORRAL_BACKEND", "CUDA_VISIBLE_DEVICES",
        "CORRAL_GPU_TYPE")
with open(os.path.join(ckpt, "env.jsonl"), "a") as f:
    f.write(json.dumps({"pid": os.getpid(), "config": config,
                        **{k: os.environ.get(k) for k in keys}}) + "\n")

stop = False


def on_term(signum, frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
state_file = os.path.join(ckpt, "count.json")
count = json.load(open(state_file))["count"] if os.path.exists(state_file) else 0
print(f"rank {rank} launch {launch} starts at {count}", flush=True)

if mode == "finish":
    sys.exit(0)
if mode == "crash" or (mode == "crash-once" and launch == 0):
    sys.exit(3)
if mode == "die-rank1" and launch == 0 and rank == 1:
    # once rank 0 has started (a loaded machine may start it seconds later), so that its
    # line is in env.jsonl before the crash stops it
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not any(
            json.loads(line)["RANK"] == "0" and json.loads(line)["config"]["launch"] == 0
            for line in open(os.path.join(ckpt, "env.jsonl"))):
        time.sleep(0.02)
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "sleep":
    while not stop:
        time.sleep(0.02)
    sys.exit(143)

hold_file = os.path.join(ckpt, "hold")
while count < steps or (mode == "held" and os.path.exists(hold_file)):
    if stop:
        if rank == 0:
            tmp = state_file + ".tmp"
            with open(tmp, "w") as f:
                json.dump({"count": count}, f)
            os.replace(tmp, state_file)
        print(f"rank {rank} stopped at {count}", flush=True)
        sys.exit(143)
    time.sleep(0.02)
    count += 1
print(f"rank {rank} finished at {count}", flush=True)
