"""Dead hosts, as Prefect sees them: a flow run whose machine died stays Running forever unless
something marks it crashed. Workers that set `PREFECT_FLOWS_HEARTBEAT_FREQUENCY` (30 s at
least) send a heartbeat event per running flow run; the automation made here marks a run
Crashed when its heartbeats stop for `silent_s` without the run finishing, the way Prefect's
own recipe ("Detect zombie flows") does. A crashed shard's run is retried by the run that
started it (another worker takes it) long before `scale.shard_timeout_s` would give up."""

from __future__ import annotations

from datetime import timedelta

from prefect.automations import Automation
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import StateType
from prefect.events.actions import ChangeFlowRunState
from prefect.events.schemas.automations import EventTrigger, Posture
from prefect.events.schemas.events import ResourceSpecification

AUTOMATION_NAME = "gymflow: crash silent flow runs"

#: Heartbeats a worker sends (`PREFECT_FLOWS_HEARTBEAT_FREQUENCY`), and the silence that marks a
#: run crashed: three missed beats, so a busy machine is not taken for a dead one.
HEARTBEAT_S = 30
SILENT_S = 3 * HEARTBEAT_S


def crash_silent_runs(silent_s: float = SILENT_S) -> tuple[Automation, bool]:
    """Create the automation once (kept as it is if one of its name exists); returns it and
    whether it was made now."""
    with get_client(sync_client=True) as client:
        found = client.read_automations_by_name(AUTOMATION_NAME)
    if found:
        return Automation.model_validate(found[0].model_dump()), False
    automation = Automation(
        name=AUTOMATION_NAME,
        description="Marks a flow run Crashed when its heartbeats stop (its host died), so a "
        "sharded gymflow run retries the shard on another worker.",
        trigger=EventTrigger(
            after={"prefect.flow-run.heartbeat"},
            expect={
                "prefect.flow-run.heartbeat",
                "prefect.flow-run.Completed",
                "prefect.flow-run.Failed",
                "prefect.flow-run.Cancelled",
                "prefect.flow-run.Crashed",
            },
            match=ResourceSpecification({"prefect.resource.id": ["prefect.flow-run.*"]}),
            for_each={"prefect.resource.id"},
            posture=Posture.Proactive,
            threshold=1,
            within=timedelta(seconds=silent_s),
        ),
        actions=[
            ChangeFlowRunState(
                state=StateType.CRASHED,
                message=f"no heartbeat for {silent_s:.0f}s: its host is gone (gymflow)",
            )
        ],
    )
    return automation.create(), True
