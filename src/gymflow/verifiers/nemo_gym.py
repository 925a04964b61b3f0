"""A NeMo Gym resources server's own verifier, reached over its `/verify` route.

The verdict is the server's (`gymflow.environments.nemo_gym.resources`); this registration gives
it a name and a version, whose parameters are the server's identity: its name, a hash of its
code and configuration files, and the parameters its config sets. A changed server is a new
verifier version, so two runs compare only when the same server judged them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gymflow.verifiers.base import Verdict, VerifierError, VerifyInput, verifier


class NemoGymServer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    server: str = Field(description="the resources server's name (its folder)")
    code: str = Field(description="a hash of its code and configuration files")
    config: dict[str, Any] = Field(default_factory=dict, description="its config's parameters")


#: A judge behind a server can be slow; the server's own timeouts end a stuck call first.
@verifier("nemo_gym", params=NemoGymServer, runs="threads", timeout_s=600.0)
def nemo_gym(inp: VerifyInput, params: NemoGymServer) -> Verdict:
    # Only a NeMo Gym environment's resources server judges: it overrides this with its /verify.
    raise VerifierError(
        f"verifier nemo_gym ({params.server}) judges only through its resources server's "
        "/verify; name a NeMo Gym environment (ng-...) instead of the verifier"
    )
