"""The client's messages read one frame at a time, each one's length checked before its body is read.

pygwire frames and decodes messages, but it accepts any length a client announces up to 1 GB and
buffers the body until it has arrived: two unauthenticated sockets took the server from 180 MB to
883 MB. Here the length is read first and refused above the limit of the connection's phase:
PostgreSQL's 10,000 bytes before authentication (``MAX_STARTUP_MESSAGE``: its
MAX_STARTUP_PACKET_LENGTH; SCRAM's messages take a few hundred), and after it what a batch of
``MAX_SQL_LENGTH`` characters needs (``MAX_MESSAGE``). Only a whole frame is given to pygwire, which
then decodes exactly that one message.

Every wait for the client ends at the connection's deadline (the start-up timeout) or, without one,
after the idle timeout: ``TimeoutError``, whose handling closes the connection.
"""

from __future__ import annotations

import socket
import struct
import time

from dpsql.sql.parse import MAX_SQL_LENGTH

#: The most bytes of one message before authentication (PostgreSQL's MAX_STARTUP_PACKET_LENGTH).
MAX_STARTUP_MESSAGE = 10_000
#: The most bytes of one message after it: a Query or Parse of MAX_SQL_LENGTH characters of up to
#: four bytes each in UTF-8, with room for a Parse's parameter types or a Bind's values.
MAX_MESSAGE = 4 * MAX_SQL_LENGTH + 65_536
_RECEIVE = 65_536


class ClientGoneError(Exception):
    """The client closed the connection."""


class FrameError(Exception):
    """A frame that cannot be read: its length is over the limit, or shorter than its own header."""


class Frames:
    """Whole frames from one socket; ``limit``, ``deadline`` (time.monotonic) and ``idle`` bound them."""

    def __init__(self, sock: socket.socket, *, deadline: float, idle: float) -> None:
        self.sock = sock
        self.limit = MAX_STARTUP_MESSAGE
        self.deadline: float | None = deadline
        self.idle = idle
        self._inbox = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes received and not yet returned in a frame."""
        return len(self._inbox)

    def arm(self) -> None:
        """Set the socket's timeout for the next wait: what is left until the deadline, else ``idle``."""
        if self.deadline is None:
            self.sock.settimeout(self.idle)
            return
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the start-up timeout has passed")
        self.sock.settimeout(left)

    def next(self, *, startup: bool) -> bytes:
        """The next message: Int32 length and body in start-up framing, else Byte1 type, Int32 length, body."""
        header = self._take(4 if startup else 5)
        (length,) = struct.unpack_from("!I", header, len(header) - 4)
        if length > self.limit:
            raise FrameError(f"a message of {length:,} bytes is longer than the {self.limit:,} bytes this server "
                             "reads at this point of the conversation")
        if length < (8 if startup else 4):  # the length counts itself, and a start-up message's code
            raise FrameError(f"a message that announces {length} bytes, fewer than its own header")
        return header + self._take(length - 4)

    def _take(self, size: int) -> bytes:
        while len(self._inbox) < size:
            self.arm()
            data = self.sock.recv(_RECEIVE)
            if not data:
                raise ClientGoneError
            self._inbox += data
        taken = bytes(self._inbox[:size])
        del self._inbox[:size]
        return taken
