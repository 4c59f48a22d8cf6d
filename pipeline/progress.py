"""Progress on the terminal: a bar with rate and ETA on a TTY, plain log lines otherwise.

The bar owns the last line of stderr while it runs: ``ProgressAwareHandler`` (the CLI's log
handler) clears it before a log line and draws it again after, so the two never share a line.
"""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("rechain.progress")

#: The bar drawn on the terminal now, if any (one at a time: stages run one after another).
_active: Progress | None = None


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``; ``--`` when not known yet."""
    if seconds != seconds or seconds < 0 or seconds == float("inf"):
        return "--"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class Progress:
    """Work done out of ``total`` (bytes, or any unit), with a count of ``unit`` items done."""

    def __init__(
        self, total_bytes: int, *, enabled: bool = True, label: str = "scan", unit: str = "records"
    ) -> None:
        self.total = max(total_bytes, 1)
        self.label = label
        self.unit = unit
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0
        self.done = 0
        self.records = 0
        self.emitted = -1
        self.line = ""

    def update(self, bytes_done: int, records: int) -> None:
        self.done += bytes_done
        self.records += records
        now = time.monotonic()
        # Nothing for the first second: a short stage prints no bar at all.
        if (
            not self.enabled
            or now - self.t0 < 1.0
            or (now - self.last < (0.2 if self.tty else 5.0))
        ):
            return
        self.last = now
        self._emit(now)
        self.emitted = self.done

    def _emit(self, now: float) -> None:
        global _active
        elapsed = max(now - self.t0, 1e-6)
        frac = min(self.done / self.total, 1.0)
        rate = self.records / elapsed
        eta = duration(elapsed / frac - elapsed) if frac > 0 else "--"
        if self.tty:
            width = 30
            bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
            self.line = (
                f"{self.label} [{bar}] {frac * 100:5.1f}%  {self.records:,} {self.unit}  "
                f"{rate:,.0f}/s  ETA {eta}"
            )
            _active = self
            self.draw()
        else:
            log.info(
                "%s %.1f%% %s %s %.0f/s ETA %s",
                self.label,
                frac * 100,
                f"{self.records:,}",
                self.unit,
                rate,
                eta,
            )

    def draw(self) -> None:
        sys.stderr.write(f"\r\033[K{self.line}")
        sys.stderr.flush()

    def close(self) -> None:
        global _active
        if self.enabled and self.emitted >= 0 and self.emitted != self.done:
            self._emit(time.monotonic())
        if self.tty and self.line:
            sys.stderr.write("\n")
            sys.stderr.flush()
        if _active is self:
            _active = None


class ProgressAwareHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stderr log handler that moves the progress bar out of the way of each line."""

    def emit(self, record: logging.LogRecord) -> None:
        bar = _active
        if bar is not None:
            self.stream.write("\r\033[K")
        super().emit(record)
        if bar is not None:
            bar.draw()
