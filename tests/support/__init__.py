"""What test modules share besides running botmux (tests/harness.py), a session actor on a
store (tests/actors.py) and the loopback fakes (tests/fakes/): the platform test worlds, the
A2A client's helpers, the peer API's chat, the crash tests' steps, the store over both
backends, clocks, and server-sent events. A test module never imports another test module;
what two need lives here.
"""
