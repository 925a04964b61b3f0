"""A flow run holds at most one artifact per key: publishing again (as a retried run does)
updates the one there, and one query finds every artifact a publish replaces."""

from __future__ import annotations

from prefect import artifacts, flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.runtime import flow_run

from gymflow.flows.artifacts import HEADLINE_KEY, SUMMARY_KEY, publish


def _pair(text: str) -> list[artifacts.Artifact]:
    return [
        artifacts.MarkdownArtifact(key=SUMMARY_KEY, markdown=f"summary {text}"),
        artifacts.TableArtifact(key=HEADLINE_KEY, table=[{"metric": "m", "value": text}]),
    ]


@flow(name="publish-twice-for-test")
def _publish_twice() -> tuple[str, list, list]:
    first = publish(*_pair("first"))
    again = publish(*_pair("again"))
    return str(flow_run.id), first, again


def test_publishing_again_updates_each_key_in_place(prefect_api) -> None:
    run_id, first, again = _publish_twice()
    assert again == first and len(set(first)) == 2
    with get_client(sync_client=True) as client:
        held = client.read_artifacts(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id]))
        )
    by_key = {a.key: a for a in held}
    assert len(held) == len(by_key) == 2, "one artifact per key"
    assert by_key[SUMMARY_KEY].data == "summary again"
    assert "again" in str(by_key[HEADLINE_KEY].data) and "first" not in str(
        by_key[HEADLINE_KEY].data
    )
