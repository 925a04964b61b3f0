"""NeMo Gym's environments under gymflow's loop: `folder` (finding resources servers and their
datasets as NeMo Gym lays them out), `environment` (their rows as tasks), `resources` (a server's
routes as a run's resources, its verdicts judged here), `launch` and `serve_app` (starting a
server on 127.0.0.1 with NeMo Gym's own interpreter, without Ray). Nothing is imported here."""
