"""The OpenAPI schema against the service (issue 45), by schemathesis: requests generated
from the schema, in-process over ASGI, each answer checked against what the schema declares
(no 500, a declared status, content type and body). Bounded: a few dozen examples per
operation, well under a minute. Skips without schemathesis (the `dev` extra has it)."""

from __future__ import annotations

from pathlib import Path

import pytest

schemathesis = pytest.importorskip("schemathesis")
from fakes import FakeExecutor  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402
from test_tenants import ADMIN_TOKEN, Service  # noqa: E402

EXAMPLES = 25  # per operation (11 operations)


def _service() -> Service:
    import tempfile

    return Service(Path(tempfile.mkdtemp(prefix="corral-schema-")), FakeExecutor())


SVC = _service()
SVC.submit("a")  # a job for the routes of one job to find (job-1)
schema = schemathesis.openapi.from_asgi("/openapi.json", SVC.app)


@schema.parametrize()
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
def test_every_answer_conforms_to_the_schema(case) -> None:
    SVC.loop.tick()  # a live loop: /healthz would answer 503 (stalled) minutes after collection
    # off: negative_data_rejection counts a 413 (a body over 1 MiB, which the schema's bounds
    # allow: 1,024 arguments of 4,096 characters) as accepting the request;
    # positive_data_acceptance wants a 2xx where the service refuses what no schema can say
    # (an unknown queue, more GPUs than the cluster: 400, declared)
    case.call_and_validate(headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                           excluded_checks=[schemathesis.checks.negative_data_rejection,
                                            schemathesis.checks.positive_data_acceptance])
