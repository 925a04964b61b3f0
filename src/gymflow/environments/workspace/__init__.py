"""Workspace tasks in Harbor's format: a folder the agent changes and a test script that judges
it (`harbor_task`), the environment a benchmark of them defines (`environment`), and the
resources server that runs their sandboxes and tests (`resources`)."""
