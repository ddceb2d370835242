"""Acting: how the frozen executor decides, as a core the services and the trainer share.

- `options`: `ActingOptions`, what can be switched (state line, held-back actions, demonstrations);
- `prompt`: the messages of one decision (append-only, so a server's prompt cache keeps the episode);
- `state`: what an ALFWorld agent knows so far, read off its own episode (the state line);
- `demos`: demonstrations per ALFWorld task type, played by the handcoded expert on ``valid_train``;
- `parse`: the thought and the action out of a completion;
- `episode`: one episode (`react`, `reason`) over a `ChatLLM` and an `EnvSession`.

No I/O of its own: the LLM and the env session are passed in. This package imports no module of its
own at import time, so `skillos.protocol` can import the leaf `options` without a circle.
"""
