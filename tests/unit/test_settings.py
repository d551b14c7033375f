from __future__ import annotations

import pytest

from infercrane.settings import Settings

FULL = {
    "INFERCRANE_DIRECTORY_TABLE": "d", "INFERCRANE_OBSERVATIONS_TABLE": "o",
    "INFERCRANE_REPLAY_TABLE": "r", "INFERCRANE_CACHE_TABLE": "c", "INFERCRANE_CAPACITY_TABLE": "cap",
    "INFERCRANE_DOCUMENTS_BUCKET": "b",
    "INFERCRANE_SECRET_PREFIX": "p", "INFERCRANE_CAPTURE_QUEUE_URL": "q1",
    "INFERCRANE_PREFETCH_QUEUE_URL": "q2", "INFERCRANE_ADAPTER_AWS_QUEUE_URL": "q3",
    "INFERCRANE_ADAPTER_GCP_QUEUE_URL": "q4", "INFERCRANE_ADAPTER_KUBERNETES_QUEUE_URL": "q5",
}


def test_settings_fail_loudly_naming_the_missing_variable():
    env = dict(FULL)
    del env["INFERCRANE_CACHE_TABLE"]
    with pytest.raises(RuntimeError, match="INFERCRANE_CACHE_TABLE"):
        Settings.from_env(env)


def test_settings_take_the_lambda_region_and_coerce_numbers():
    settings = Settings.from_env({**FULL, "AWS_REGION": "eu-west-1", "INFERCRANE_RETENTION_DAYS": "7"})
    assert settings.region == "eu-west-1"
    assert settings.retention_days == 7
    assert settings.aws_endpoint_url is None


def test_settings_refuse_an_out_of_range_retention():
    with pytest.raises(RuntimeError, match="INFERCRANE_RETENTION_DAYS"):
        Settings.from_env({**FULL, "INFERCRANE_RETENTION_DAYS": "0"})


def test_a_pubsub_topic_must_be_a_full_topic_name():
    with pytest.raises(RuntimeError, match="INFERCRANE_ADAPTER_GCP_PUBSUB_TOPIC"):
        Settings.from_env({**FULL, "INFERCRANE_ADAPTER_GCP_PUBSUB_TOPIC": "my-topic"})
    ok = Settings.from_env({**FULL, "INFERCRANE_ADAPTER_GCP_PUBSUB_TOPIC": "projects/p/topics/t"})
    assert ok.adapter_gcp_pubsub_topic == "projects/p/topics/t"
    # CloudFormation passes an unset parameter as an empty string: that means "use SQS".
    unset = Settings.from_env({**FULL, "INFERCRANE_ADAPTER_GCP_PUBSUB_TOPIC": ""})
    assert unset.adapter_gcp_pubsub_topic is None


def test_the_local_stack_passes_the_callers_own_tuning_to_its_functions():
    from infercrane.local.stack import LocalStack, find_template

    stack = LocalStack(find_template())
    assert Settings.from_env({**FULL, **stack._local_knobs({}, {}, "http://127.0.0.1:1")}
                             ).trace_sync_limit == 10_000
    tuned = stack._local_knobs({"INFERCRANE_TRACE_SYNC_LIMIT": "50"}, {}, "http://127.0.0.1:1")
    assert Settings.from_env({**FULL, **tuned}).trace_sync_limit == 50
