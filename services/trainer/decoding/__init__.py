"""Constrained decoding of the in-process policy: the curator's JSON schema as a byte automaton
(`grammar`) and the token masks that sample under it and replay it for the loss (`constrained`)."""
