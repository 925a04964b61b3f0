"""A NeMo Gym resources server's own verifier, reached over its `/verify` route.

The verdict is the server's (`gymflow.environments.nemo_gym.resources`); this registration gives
it a name and a version, whose parameters are the server's identity: its name, a hash of its
code and configuration files, and the parameters its config sets. A changed server is a new
verifier version, so two runs compare only when the same server judged them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gymflow.core.credentials import ApiKeyEnv, ServerUrl
from gymflow.verifiers.base import Verdict, VerifierError, VerifyInput, verifier


class JudgeSettings(BaseModel):
    """The judge model a NeMo Gym judge server asks (`verifier_params.judge`): part of the
    verifier's parameters, so another judge is another verifier version. No key in it: the
    name of the variable holding one."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    base_url: ServerUrl = Field(
        description="The judge's model server, e.g. http://127.0.0.1:8000/v1"
    )
    model: str = Field(description="Model name sent to the judge server.")
    kind: Literal["responses", "chat_completions"] = "responses"
    api_key_env: ApiKeyEnv | None = Field(None, description="Environment variable holding the key.")
    temperature: float | None = Field(0.0, ge=0.0, le=2.0, description="null: not sent.")
    max_output_tokens: int = Field(1024, ge=1)
    timeout_s: float = Field(120.0, gt=0.0)
    max_retries: int = Field(2, ge=0, le=10)


class NemoGymServer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    server: str = Field(description="the resources server's name (its folder)")
    code: str = Field(description="a hash of its code and configuration files")
    config: dict[str, Any] = Field(default_factory=dict, description="its config's parameters")
    judge: JudgeSettings | None = Field(
        None, description="the judge model, for a server that asks one (verifier_params.judge)"
    )


#: A judge behind a server can be slow; the server's own timeouts end a stuck call first.
@verifier("nemo_gym", params=NemoGymServer, runs="threads", timeout_s=600.0)
def nemo_gym(inp: VerifyInput, params: NemoGymServer) -> Verdict:
    # Only a NeMo Gym environment's resources server judges: it overrides this with its /verify.
    raise VerifierError(
        f"verifier nemo_gym ({params.server}) judges only through its resources server's "
        "/verify; name a NeMo Gym environment (ng-...) instead of the verifier"
    )
