"""The API fuzzed statefully (issue 43 item 5): schemathesis walks the OpenAPI schema's links
(POST /jobs, then GET, logs, telemetry and cancel of the job it made) for at least --requests
requests, each sent with one of four credentials in turn: team a's token, team b's, the
admin's, none. Every answer is checked against the schema (status, content type, body) and
for leaks: an answer to a team names no job of the other team (by id) and no other queue.

Printed: requests by credential and by status, answers of 500 or more, schema violations (by
check), leaks, and the rate. The service runs in process (ASGI) over a fake executor with four
slots and two team queues; jobs of both teams exist from the start. Bounded by --requests and
--max-seconds.

Run: python benchmarks/live/bench_api_fuzz.py [--requests 10000] [--max-seconds 1800]
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: _common
from _common import machine  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "service"))

import schemathesis  # noqa: E402
from fakes import FakeExecutor  # noqa: E402  (the tests' executor that runs nothing)
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis.errors import FlakyStrategyDefinition  # noqa: E402
from test_tenants import ADMIN_TOKEN, Service  # noqa: E402  (the tests' two-team service)

CREDENTIALS = ("a", "b", "admin", "none")
JOB_ID = re.compile(r"job-\d+")
#: checks off, as in tests/service/test_api_schema_fuzz.py: a 413 for a body the schema's bounds
#: allow, and a 400 for what no schema can say (an unknown queue, more GPUs than the cluster)
EXCLUDED = [schemathesis.checks.negative_data_rejection,
            schemathesis.checks.positive_data_acceptance]


class Tally:
    """What the fuzzing saw."""

    def __init__(self) -> None:
        self.requests = 0
        self.by_credential: collections.Counter[str] = collections.Counter()
        self.by_status: collections.Counter[int] = collections.Counter()
        self.violations: collections.Counter[str] = collections.Counter()
        self.leaks: list[str] = []
        self.owner: dict[str, str] = {}  # job id -> the queue it was submitted to
        self.restarts = 0  # hypothesis runs ended as inconsistent (the state moved on)


def fuzz(requests: int, max_seconds: float) -> Tally:
    svc = Service(Path(tempfile.mkdtemp(prefix="corral-api-fuzz-")), FakeExecutor())
    tally = Tally()
    for queue in ("a", "a", "b", "b"):
        tally.owner[svc.submit(queue)] = queue
    svc.loop.tick()
    headers = {"a": svc.token("a"), "b": svc.token("b"),
               "admin": {"Authorization": f"Bearer {ADMIN_TOKEN}"}, "none": {}}
    schema = schemathesis.openapi.from_asgi("/openapi.json", svc.app)
    began = time.monotonic()
    current: dict[str, str] = {}

    class Workflow(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case):
            credential = CREDENTIALS[tally.requests % len(CREDENTIALS)]
            current["credential"] = credential
            return {"headers": dict(headers[credential])}

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            tally.requests += 1
            credential = current["credential"]
            tally.by_credential[credential] += 1
            tally.by_status[response.status_code] += 1
            if tally.requests % 50 == 0:
                svc.loop.tick()  # a live loop: rounds run, /healthz stays fresh
            _note_jobs(svc, tally)
            if credential in ("a", "b"):
                _check_leaks(response, credential, case, tally)
            try:
                case.validate_response(response, excluded_checks=EXCLUDED,
                                       transport_kwargs=kwargs)
            except Exception as exc:  # noqa: BLE001 - counted, the walk goes on
                for failure in getattr(exc, "exceptions", [exc]):
                    tally.violations[type(failure).__name__ + ": " +
                                     str(getattr(failure, "title", failure))[:80]] += 1

    # runs of 25 walks of up to 20 steps each, until enough requests were made (a walk cut
    # short by an exception would be a failure to hypothesis, which then replays it)
    # hypothesis sees the service's state change between its runs (the jobs made so far, and
    # answers that differ by credential) as inconsistent data: such a run ends, the next begins
    while tally.requests < requests and time.monotonic() - began < max_seconds:
        try:
            Workflow.run(settings=settings(max_examples=25, stateful_step_count=20,
                                           deadline=None, database=None,
                                           suppress_health_check=list(HealthCheck)))
        except FlakyStrategyDefinition:
            tally.restarts += 1
    svc.close()
    return tally


def _note_jobs(svc: Service, tally: Tally) -> None:
    """Every job's queue, as the store keeps it (jobs the fuzzer made, with any credential)."""
    for job in svc.loop.jobs.values():
        tally.owner.setdefault(job.id, job.spec.queue or "default")


def _check_leaks(response, credential: str, case, tally: Tally) -> None:
    """Job ids of the other team in the answer (but those the request itself named, which a
    refusal may repeat), or the other queue's name as a job's queue."""
    other = "b" if credential == "a" else "a"
    asked = set(JOB_ID.findall(case.formatted_path))
    theirs = [i for i in set(JOB_ID.findall(response.text)) - asked
              if tally.owner.get(i) == other]
    named = f'"queue":"{other}"' in response.text.replace(" ", "")
    if theirs or named:
        tally.leaks.append(f"{case.method} {case.formatted_path} as {credential} "
                           f"({response.status_code}): {theirs or 'queue ' + other}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--max-seconds", type=float, default=1800.0)
    args = ap.parse_args()
    print(f"# {machine()}; schemathesis {schemathesis.__version__}", flush=True)
    t0 = time.monotonic()
    tally = fuzz(args.requests, args.max_seconds)
    took = time.monotonic() - t0
    print(f"requests: {tally.requests} in {took:.0f} s ({tally.requests / took:.0f}/s)")
    print("by credential: " + ", ".join(f"{c} {tally.by_credential[c]}" for c in CREDENTIALS))
    print("by status: " + ", ".join(f"{s} {n}" for s, n in sorted(tally.by_status.items())))
    errors = sum(n for s, n in tally.by_status.items() if s >= 500)
    print(f"answers of 500 or more: {errors}")
    print(f"schema violations: {sum(tally.violations.values())}"
          + "".join(f"\n  {n} x {what}" for what, n in tally.violations.most_common()))
    print(f"leaks of the other team's jobs or queue: {len(tally.leaks)}"
          + "".join(f"\n  {leak}" for leak in tally.leaks[:10]))
    print(f"jobs made (before and by the walks): {len(tally.owner)}; hypothesis runs ended "
          f"early as inconsistent (the service's state moved on): {tally.restarts}")
    sys.exit(1 if errors or tally.violations or tally.leaks else 0)


if __name__ == "__main__":
    main()
