"""A flow run holds at most one artifact per key: publishing again, in the same attempt or in a
retry of the run (another process), updates the one there; only a retry asks the API for it."""

from __future__ import annotations

from prefect import artifacts, flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
from prefect.runtime import flow_run

from gymflow.flows import artifacts as published
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


def _held(run_id: str) -> dict[str, artifacts.Artifact]:
    with get_client(sync_client=True) as client:
        held = client.read_artifacts(
            flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id]))
        )
    by_key = {a.key: a for a in held}
    assert len(held) == len(by_key) == 2, "one artifact per key"
    return by_key


def test_a_retry_updates_what_the_earlier_attempt_published(prefect_api, monkeypatch) -> None:
    class Retried:
        """`prefect.runtime.flow_run` as the run's second attempt sees it."""

        run_count = 2

        @property
        def id(self) -> str:
            return flow_run.id

    @flow(name="publish-then-retry-for-test")
    def publish_then_retry() -> tuple[str, list, list]:
        first = publish(*_pair("first"))
        published._published.clear()  # the retry runs in a process of its own
        monkeypatch.setattr(published, "flow_run", Retried())
        return str(flow_run.id), first, publish(*_pair("again"))

    run_id, first, again = publish_then_retry()
    assert again == first
    assert _held(run_id)[SUMMARY_KEY].data == "summary again"


def test_publishing_again_updates_each_key_in_place(prefect_api) -> None:
    run_id, first, again = _publish_twice()
    assert again == first and len(set(first)) == 2
    by_key = _held(run_id)
    assert by_key[SUMMARY_KEY].data == "summary again"
    headline = str(by_key[HEADLINE_KEY].data)
    assert "again" in headline and "first" not in headline
