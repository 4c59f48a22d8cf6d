"""Progress on the terminal: a bar with rate and ETA on a TTY, plain log lines otherwise."""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("rechain.progress")


class Progress:
    def __init__(self, total_bytes: int, *, enabled: bool = True, label: str = "scan") -> None:
        self.total = max(total_bytes, 1)
        self.label = label
        self.enabled = enabled
        self.tty = enabled and sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.last = 0.0
        self.done = 0
        self.records = 0
        self.emitted = -1

    def update(self, bytes_done: int, records: int) -> None:
        self.done += bytes_done
        self.records += records
        now = time.monotonic()
        if not self.enabled or (now - self.last < (0.2 if self.tty else 5.0)):
            return
        self.last = now
        self._emit(now)
        self.emitted = self.done

    def _emit(self, now: float) -> None:
        elapsed = max(now - self.t0, 1e-6)
        frac = min(self.done / self.total, 1.0)
        rate = self.records / elapsed
        eta = (elapsed / frac - elapsed) if frac > 0 else float("nan")
        if self.tty:
            width = 30
            bar = "#" * int(frac * width) + "-" * (width - int(frac * width))
            sys.stderr.write(
                f"\r{self.label} [{bar}] {frac * 100:5.1f}%  {self.records:,} records  "
                f"{rate:,.0f}/s  ETA {eta:5.1f}s "
            )
            sys.stderr.flush()
        else:
            log.info(
                "%s %.1f%% %d records %.0f/s ETA %.1fs",
                self.label,
                frac * 100,
                self.records,
                rate,
                eta,
            )

    def close(self) -> None:
        if self.enabled and self.emitted != self.done:
            self._emit(time.monotonic())
            if self.tty:
                sys.stderr.write("\n")
