"""The ALFWorld game worker: a separate process that plays one game at a time.

ALFWorld's TextWorld env is not thread-safe (alfworld #92) and a game can crash or hang, so each
session's game lives in its own process. The parent talks to it over a pipe with tuples:

    ("load", game_file, expert, seed) -> ("ok", state)  start a game (seconds: the PDDL is translated)
    ("step", action)            -> ("ok", state)
    ("exit",)                   -> the process ends
    any failure                 -> ("error", "<type>: <message>")

``state`` is a plain dict: observation, won, done, admissible_actions, expert_action.
"""

from __future__ import annotations

import os
import random
import signal
import traceback


def main(conn) -> None:
    """The worker's loop (target of multiprocessing.Process)."""
    # Ctrl-C on the server is for the server: it stops its workers itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # deferred: ALFWorld/TextWorld (seconds to import) load in the worker process, not in the server
    from services.envs.alfworld.tw import new_env, state_of

    env, expert = None, False
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except EOFError:  # the parent went away
            return
        try:
            if msg[0] == "load":
                _, game_file, expert, seed = msg
                # the games are deterministic, the handcoded expert is not (it breaks ties at random)
                random.seed(seed)
                if env is not None:
                    env.close()
                env = new_env(game_file, expert)
                conn.send(("ok", state_of(env.reset(), expert)))
            elif msg[0] == "step":
                game_state, _score, done = env.step(msg[1])
                state = state_of(game_state, expert)
                state["done"] = bool(done) or state["won"]
                conn.send(("ok", state))
            elif msg[0] == "exit":
                return
            else:
                conn.send(("error", f"ValueError: unknown message {msg[0]!r}"))
        except Exception as e:  # noqa: BLE001 - report to the parent; it fails the session
            conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}"))
