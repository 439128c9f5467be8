"""Property-based: whatever a client sends, to whichever endpoint, the service answers 2xx or a
one-line 4xx, stays healthy, lists its jobs and still runs a normal job to completion.

The service runs in-process with its real parts - the API, the control loop in its thread and
the local executor - so a bad submission that got past the API would fail in the executor as it
did before (issue 12: a NUL byte killed the executor thread). Generated bodies are JSON built
from the submission's own fields with values of every type (strings with NUL bytes, lone
surrogates and other unprintables, huge and non-finite numbers, nested containers), JSON with
arbitrary keys, and raw bytes. Bounded: MAX_EXAMPLES requests, each followed by the checks.

Safety: generated commands are run if the API accepts them, so workers get a PATH holding only
the test's `ok` program: no generated name can start anything else.
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from pathlib import Path
from urllib.parse import quote

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

with warnings.catch_warnings():  # starlette's test client warns about its httpx dependency
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient  # noqa: E402

from corral.executors.local import LocalExecutor  # noqa: E402
from corral.policies import create_policy  # noqa: E402
from corral.service.api import create_app  # noqa: E402
from corral.service.loop import ControlLoop  # noqa: E402
from corral.service.store import Store  # noqa: E402

MAX_EXAMPLES = 150

#: slow: 150 requests to a live app. One xdist group: test_the_fuzzing_ran reads the count the
#: property left in this process, so both run on the same worker, in file order.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("api_fuzz")]

TOKEN = "fuzz-token"
JOB_CWD = Path(__file__).parent  # clear of the data directory ("/" holds it: refused)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
COUNT = {"requests": 0}


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    bin_dir = tmp_path_factory.mktemp("fuzz-bin")  # beside the data directory (job sandbox)
    ok = bin_dir / "ok"
    ok.write_text("#!/bin/sh\nexit 0\n")
    ok.chmod(0o755)
    saved_path = os.environ["PATH"]
    os.environ["PATH"] = str(bin_dir)  # what workers inherit: only `ok` can be found
    store = Store(root / "state.db")
    executor = LocalExecutor(root, slots=2, max_retries=0, stop_timeout_s=2, crash_grace_s=0.5,
                             poll_s=0.02)
    loop = ControlLoop(store, executor, create_policy("fifo"), interval_s=0.5, tick_s=0.02)
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    client = TestClient(create_app(store, executor, loop, TOKEN), raise_server_exceptions=False)
    try:
        yield client
    finally:
        os.environ["PATH"] = saved_path
        client.close()
        stop.set()
        thread.join(10)
        executor.shutdown(5)
        store.close()
        print(f"\ngenerated requests: {COUNT['requests']}")


# -- what is sent ----------------------------------------------------------------------------

# any character, and often the ones that broke the service: NUL, lone surrogates, '=', newline
chars = st.text(st.characters(exclude_categories=()), max_size=6)
special = st.sampled_from(["\x00", "\ud800", "\udcff", "=", "\n", "/", "${HOME}", "é"])
any_text = st.one_of(chars, st.builds(lambda a, s, b: a + s + b, chars, special, chars))
var_names = st.one_of(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), any_text)
numbers = st.one_of(st.integers(-(2 ** 70), 2 ** 70), st.floats(allow_nan=True),
                    st.sampled_from([0, 1, 2, -1, 10 ** 30]))
scalars = st.one_of(st.none(), st.booleans(), numbers, any_text)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(any_text, inner, max_size=4)), max_leaves=8)
FIELDS = ["command", "name", "cwd", "env", "gpus", "min_gpus", "max_gpus", "batch_size",
          "max_batch_size", "min_local_bsz", "max_local_bsz", "adaptive", "lr_rule"]
# A submission that is well formed but for its strings (any character), with up to two fields
# (or an unknown one) replaced by anything: most bodies get as far as the checks of one field.
plausible = st.fixed_dictionaries(
    {"command": st.lists(any_text, min_size=1, max_size=4)},
    optional={"cwd": st.one_of(st.sampled_from(["/", "/tmp"]), any_text),
              "env": st.dictionaries(var_names, any_text, max_size=3),
              "name": any_text, "gpus": st.integers(1, 2), "batch_size": st.integers(1, 64),
              "adaptive": st.booleans()})
submissions = st.builds(lambda base, changed: {**base, **changed}, plausible,
                        st.dictionaries(st.sampled_from([*FIELDS, "unknown_field"]), values,
                                        max_size=2))
as_json = st.one_of(submissions, values).map(
    lambda v: json.dumps(v, allow_nan=True).encode())  # lone surrogates as \\ud800 escapes
bodies = st.one_of(as_json, st.binary(max_size=512))
job_ids = st.one_of(st.just("job-1"), any_text.filter(lambda t: "/" not in t and t not in
                                                      (".", "..")))
submit = st.tuples(st.just("POST"), st.just("/jobs"), bodies, st.just({}))
requests = st.one_of(
    submit, submit,  # most requests submit
    st.tuples(st.sampled_from(["GET", "POST"]),
              st.sampled_from(["/jobs", "/jobs/{id}", "/jobs/{id}/telemetry",
                               "/jobs/{id}/cancel", "/jobs/{id}/logs", "/metrics", "/cluster",
                               "/healthz", "/", "/docs", "/static/dashboard.js",
                               "/static/{id}"]),
              bodies, st.dictionaries(st.sampled_from(["rank", "tail"]),
                                      st.one_of(any_text, numbers.map(str)), max_size=2)),
)


def quoted(text: str) -> str:
    """`text` percent-encoded byte for byte (lone surrogates as the bytes that encode them)."""
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def url_for(template: str, job_id: str, params: dict[str, str]) -> str:
    query = "&".join(f"{quoted(k)}={quoted(v)}" for k, v in params.items())
    return template.replace("{id}", quoted(job_id)) + (f"?{query}" if query else "")


def run_normal_job(client: TestClient) -> None:
    resp = client.post("/jobs", headers=AUTH, json={"command": ["ok"], "cwd": str(JOB_CWD)})
    assert resp.status_code == 201, resp.text
    job_id = resp.json()["id"]
    deadline = time.monotonic() + 60
    while (status := client.get(f"/jobs/{job_id}", headers=AUTH).json()["status"]) != "done":
        assert status in ("queued", "running"), client.get(f"/jobs/{job_id}", headers=AUTH).json()
        assert time.monotonic() < deadline, f"{job_id} did not finish"
        time.sleep(0.02)


def reproductions(test):
    """The submissions of issue 12 that once broke the service, tried first every run."""
    raw = [rb'{"command":["python","-c","print(1)\u0000"],"cwd":"/tmp"}',
           rb'{"command":["python","-c","print(\"\ud800\")"],"cwd":"/tmp"}',
           rb'{"command":["ok"],"env":{"A=B":"1"}}',
           rb'{"command":["ok"],"batch_size":1000000000000000000000000000000}',
           b'{"command":["ok","' + b"x" * (2 << 20) + b'"]}']
    for body in raw:
        test = example(request=("POST", "/jobs", body, {}), job_id="job-1", authorized=True)(test)
    return test




@settings(max_examples=MAX_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(request=requests, job_id=job_ids, authorized=st.sampled_from([True] * 9 + [False]))
@reproductions
def test_no_request_breaks_the_service(service, request, job_id, authorized) -> None:
    method, template, body, params = request
    COUNT["requests"] += 1
    headers = {**(AUTH if authorized else {}), "Content-Type": "application/json"}
    resp = service.request(method, url_for(template, job_id, params), content=body,
                           headers=headers)
    assert resp.status_code < 500, (resp.status_code, resp.text)
    if resp.status_code >= 400:
        detail = resp.json()["detail"]
        assert isinstance(detail, str) and "\n" not in detail and detail
    health = service.get("/healthz")
    assert health.status_code == 200, health.text
    listed = service.get("/jobs", headers=AUTH)
    assert listed.status_code == 200 and isinstance(listed.json()["jobs"], list)
    run_normal_job(service)


def test_the_fuzzing_ran(service) -> None:
    """Runs after the property (file order): it sent what it was set to send."""
    if COUNT["requests"] == 0 and os.environ.get("PYTEST_XDIST_WORKER"):
        # xdist_group does not keep the two on one worker with pytest 9 and xdist 3.8 here
        pytest.skip("the property ran in another xdist worker: its count is not in this process")
    assert COUNT["requests"] >= MAX_EXAMPLES
