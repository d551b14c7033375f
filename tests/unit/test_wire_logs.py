"""Library wire logs (request and response bodies) stay off at every log level we offer."""

from __future__ import annotations

import logging

import pytest

import infercrane
from infercrane.logs import WIRE_LOGGERS


@pytest.mark.parametrize("name", ["botocore.endpoint", "botocore.parsers", "urllib3.connectionpool",
                                  "pynamodb.connection.base", "kubernetes.client.rest"])
def test_wire_loggers_stay_quiet_when_the_root_is_set_to_debug(name, caplog):
    assert infercrane.__version__
    caplog.set_level("DEBUG")  # what `infercrane local serve --log-level DEBUG` does to the root
    logging.basicConfig(level="DEBUG")
    logger = logging.getLogger(name)
    logger.debug("CANARY-wire-body")
    assert not logger.isEnabledFor(logging.DEBUG)
    assert "CANARY-wire-body" not in caplog.text


def test_every_library_that_logs_payloads_is_listed():
    assert {"botocore", "urllib3", "pynamodb"} <= set(WIRE_LOGGERS)
