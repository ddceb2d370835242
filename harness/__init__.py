"""The harness: SkillOS's main job as an application over the services, not part of the core library.

The main job (`runner.run_job`, `skillos run`), its report and statistics, and the local stack of
service processes (`stack`, `skillos up` / `skillos down`). The streaming loop and the methods it plays
are the core's (`skillos.stream`, `skillos.methods`); the runner gives them the services' HTTP clients.
"""
