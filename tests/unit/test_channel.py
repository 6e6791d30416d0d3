"""The link between the appliance and its child processes (the console, the SNMP agent): framing, calls and their
failures."""

from __future__ import annotations

import pickle
import socket
import struct
import threading

import pytest

from appliance.edge.channel import MAX_FRAME_BYTES, CallFailed, Channel, ChannelError, Frames, frame


def test_frames_reassemble_messages_split_anywhere() -> None:
    data = frame({"type": "status", "n": 1}) + frame({"type": "stats", "n": 2})
    for cut in range(len(data) + 1):
        frames = Frames()
        got = frames.feed(data[:cut]) + frames.feed(data[cut:])
        assert [m["n"] for m in got] == [1, 2]


def test_a_broken_peer_is_named_not_followed() -> None:
    with pytest.raises(ChannelError, match="at most"):
        Frames().feed(struct.pack("!I", MAX_FRAME_BYTES + 1))
    with pytest.raises(ChannelError, match="not a dict"):
        body = pickle.dumps([1, 2])
        Frames().feed(struct.pack("!I", len(body)) + body)
    with pytest.raises(ChannelError, match="undecodable"):
        Frames().feed(struct.pack("!I", 3) + b"xyz")


def _appliance_end(sock: socket.socket, answer: dict[str, object]) -> None:
    frames = Frames()
    while True:
        data = sock.recv(65536)
        if not data:
            return
        for message in frames.feed(data):
            if message["method"] == "ok":
                sock.sendall(frame({"type": "reply", "id": message["id"], "ok": True, "result": message["args"]}))
            elif message["method"] == "refuse":
                sock.sendall(frame({"type": "reply", "id": message["id"], "ok": False, "error": "busy"}))
            else:
                answer["hang"] = message  # never answered


def test_calls_get_their_own_reply_and_failures_are_reported() -> None:
    ours, theirs = socket.socketpair()
    answer: dict[str, object] = {}
    threading.Thread(target=_appliance_end, args=(theirs, answer), daemon=True).start()
    channel = Channel(ours)
    runner = threading.Thread(target=channel.run, args=(lambda m: True,), daemon=True)
    runner.start()
    assert channel.call("ok", 1, "two") == (1, "two")
    with pytest.raises(CallFailed, match="refuse: busy"):
        channel.call("refuse")
    with pytest.raises(CallFailed, match="no answer"):
        channel.call("hang", timeout_s=0.05)
    theirs.shutdown(socket.SHUT_RDWR)  # the appliance went away: the reader ends, later calls fail at once
    runner.join(5)
    assert not runner.is_alive()
    with pytest.raises(CallFailed):
        channel.call("ok")
