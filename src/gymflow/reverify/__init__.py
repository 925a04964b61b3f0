"""Reverify, in one place: new rewards for a stored run under changed verifier parameters
(`new_version`, `gym eval reverify`), and the check that judges a run again under its own
version and compares (`check`, `gym eval reverify --check`). The store keeps the versions
(`store.verifier_versions`); which code a verifier ran is `verifiers.identity`.

Cut-off: judges stored rollouts again, never calls the policy model; no Prefect (the flow is
`gymflow.flows.reverify`). Tier 4."""

__tier__ = 4

__all__ = ["check", "new_version"]
