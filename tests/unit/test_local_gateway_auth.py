"""The local gateway's admin-key check (a hostile Authorization header is a refusal, never a 500)
and its cache of authorizer decisions."""

from __future__ import annotations

import pytest

from infercrane.local.gateway import Gateway
from infercrane.local.runtime import FunctionError
from infercrane.local.template import ApiRoute


@pytest.mark.parametrize("key", ["icadmin_wrong", "ключ", "\udcff", ""])
def test_a_wrong_or_non_ascii_admin_key_is_refused_without_an_error(key):
    gateway = Gateway([], {}, None, "icadmin_right")
    assert gateway._is_admin_key(key) is False


def test_the_admin_key_is_accepted_with_surrounding_spaces():
    assert Gateway([], {}, None, "icadmin_right")._is_admin_key(" icadmin_right ") is True


# -- the authorizer's decision cache (template.yaml: ReauthorizeEvery) ----------------------------


ROUTES = [ApiRoute("Api", "POST", "/v1/observations", "default"),
          ApiRoute("Api", "GET", "/v1/traces/{digest}", "default"),
          ApiRoute("Admin", "POST", "/v1/admin/tenants", "AWS_IAM")]


class Authorizer:
    """A stand-in authorizer function: allows `good` keys with the given resource, counts calls."""

    def __init__(self, resource: str = "arn:aws:execute-api:us-east-1:123456789012:local/prod/*"):
        self.calls = 0
        self.resource = resource

    def invoke(self, event, timeout_s=None):
        self.calls += 1
        if event["authorizationToken"] != "Bearer good":
            raise FunctionError("Authorizer", "Exception", "Unauthorized")
        return {"principalId": "demo/k1", "context": {"tenant": "demo"},
                "usageIdentifierKey": "tenant-demo",
                "policyDocument": {"Statement": [{"Effect": "Allow", "Resource": self.resource,
                                                  "Action": "execute-api:Invoke"}]}}


def gateway(auth: Authorizer, ttl: float) -> Gateway:
    return Gateway(ROUTES, {"Authorizer": auth}, "Authorizer", "icadmin", authorizer_ttl_s=ttl)


def test_an_allow_decision_serves_every_route_for_its_ttl_then_is_asked_again(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr("infercrane.local.gateway.time.monotonic", lambda: clock[0])
    auth = Authorizer()
    gw = gateway(auth, ttl=60)
    for route in ROUTES[:2] * 3:
        status, extra = gw.authorize(route, {"authorization": "Bearer good"})
        assert status == 0 and extra["authorizer"]["tenant"] == "demo"
    assert auth.calls == 1
    clock[0] += 61
    assert gw.authorize(ROUTES[0], {"authorization": "Bearer good"})[0] == 0
    assert auth.calls == 2


def test_refusals_are_never_cached_and_ttl_zero_caches_nothing():
    auth = Authorizer()
    gw = gateway(auth, ttl=60)
    for _ in range(3):
        assert gw.authorize(ROUTES[0], {"authorization": "Bearer bad"})[0] == 401
    assert auth.calls == 3
    auth = Authorizer()
    gw = gateway(auth, ttl=0)
    for _ in range(3):
        assert gw.authorize(ROUTES[0], {"authorization": "Bearer good"})[0] == 0
    assert auth.calls == 3


def test_a_policy_for_one_route_is_not_reused_for_others():
    auth = Authorizer("arn:aws:execute-api:us-east-1:123456789012:local/prod/POST/v1/observations")
    gw = gateway(auth, ttl=60)
    for _ in range(2):
        gw.authorize(ROUTES[0], {"authorization": "Bearer good"})
    assert auth.calls == 2


def test_the_cache_is_keyed_by_the_whole_authorization_header():
    auth = Authorizer()
    gw = gateway(auth, ttl=60)
    assert gw.authorize(ROUTES[0], {"authorization": "Bearer good"})[0] == 0
    assert gw.authorize(ROUTES[0], {"authorization": "Bearer goodx"})[0] == 401
    assert gw.authorize(ROUTES[0], {"authorization": "bearer good"})[0] == 401
    assert auth.calls == 3


def test_concurrent_requests_with_one_key_ask_the_authorizer_once():
    import threading
    import time

    class Slow(Authorizer):
        def invoke(self, event, timeout_s=None):
            time.sleep(0.2)
            return super().invoke(event, timeout_s)

    auth = Slow()
    gw = gateway(auth, ttl=60)
    statuses: list[int] = []
    threads = [threading.Thread(target=lambda: statuses.append(
        gw.authorize(ROUTES[0], {"authorization": "Bearer good"})[0])) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert statuses == [0] * 4 and auth.calls == 1
