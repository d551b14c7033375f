"""The local gateway's admin-key check: a hostile Authorization header is a refusal, never a 500."""

from __future__ import annotations

import pytest

from infercrane.local.gateway import Gateway


@pytest.mark.parametrize("key", ["icadmin_wrong", "ключ", "\udcff", ""])
def test_a_wrong_or_non_ascii_admin_key_is_refused_without_an_error(key):
    gateway = Gateway([], {}, None, "icadmin_right")
    assert gateway._is_admin_key(key) is False


def test_the_admin_key_is_accepted_with_surrounding_spaces():
    assert Gateway([], {}, None, "icadmin_right")._is_admin_key(" icadmin_right ") is True
