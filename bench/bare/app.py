"""The baseline: a bare Lambda handler making the same AWS calls as the handler under test, with
the same SDKs.

The calls (service, operation, parameters) were recorded from the real handler's first
invocation; this handler creates its clients at import, as a plain Lambda would, and replays them.
A provider adapter's floor also imports that provider's SDK module (BENCH_BARE_IMPORTS), as a
plain handler for that provider would at module level. The bench's second floor, for a missed
target, lists there every library module the handler loaded (our own code excluded).
"""

import importlib
import os

SERVICES = [s for s in os.environ.get("BENCH_BARE_SERVICES", "").split(",") if s]
for module in filter(None, os.environ.get("BENCH_BARE_IMPORTS", "").split(",")):
    importlib.import_module(module)
if SERVICES:
    import boto3
    from botocore import xform_name
    from botocore.exceptions import ClientError

    clients = {s: boto3.client(s) for s in SERVICES}


def handler(event, context):  # type: ignore[no-untyped-def]
    answered = 0
    for service, operation, params in event["calls"]:
        try:  # noqa: SIM105 - the baseline stays free of extra imports
            getattr(clients[service], xform_name(operation))(**params)
        except ClientError:
            pass  # e.g. a conditional put that loses: the round trip is what is being matched
        answered += 1
    return {"calls": answered}
