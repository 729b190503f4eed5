"""What welchpeaks says on its own about work that takes seconds and happens once: compiling a
kernel, measuring the machine (in a detached process), that measurement failing.

One line each, logged (not warned) under the logger ``welchpeaks`` at WARNING, so a program that
configured no logging sees the message alone on stderr (Python's last-resort handler), without
a warning's file and line of library source, and an application that configured logging gets it
where it sends the rest. Silence them with
``logging.getLogger("welchpeaks").setLevel(logging.ERROR)``.
The command line prints them through its own console (:mod:`welchpeaks.cli`).
"""

from __future__ import annotations

import logging

#: the logger of every notice
log = logging.getLogger("welchpeaks")


def notify(message: str) -> None:
    """Say ``message`` (one line, starting ``welchpeaks:``)."""
    log.warning(message)
