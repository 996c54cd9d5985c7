"""`llmop pool-reload`: a llama.cpp pool's router told to read its preset again when it changes.

It runs beside llama-server in a pool's pod. The pool's preset is a ConfigMap the kubelet
updates in place, so an edit to one member's flags reaches the router without replacing
the pod: the router unloads only that member (loaded again, with its new flags, by its
next request) and the others keep serving, their requests included.
"""

from __future__ import annotations

import hashlib
import signal
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import click

REQUEST_TIMEOUT_SECONDS = 600.0  # a reload waits for a changed member to finish unloading


def digest(path: Path) -> str | None:
    """The preset's SHA-256, or None while it cannot be read (the kubelet swapping it in)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def ask_reload(engine: str, timeout: float = REQUEST_TIMEOUT_SECONDS) -> str | None:
    """``GET <engine>/models?reload=1``: None once the router has read the preset, else why not."""
    try:
        with urllib.request.urlopen(f"{engine.rstrip('/')}/models?reload=1",
                                    timeout=timeout) as resp:
            resp.read()
            return None
    except urllib.error.HTTPError as exc:  # a preset it refuses: its words say which key
        said = exc.read(2000).decode("utf-8", "replace").strip()
        return f"the router answered {exc.code}" + (f": {said}" if said else "")
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return f"the router is not answering ({reason})"


UNREADABLE_LOOKS = 3  # a look may fall in the kubelet's swap; three in a row are said


class PresetWatch:
    """The preset's content, and whether the router has read it since it last changed.

    The preset the watch first sees is the one the router read as it started: both
    containers start together on the same volume. The router is not asked then, as a
    reload also forgets a member's failed load, which its status reports (LoadFailed).
    """

    def __init__(self, preset: Path, reload: Callable[[], str | None]) -> None:
        self.preset, self.reload = preset, reload
        self.applied: str | None = digest(preset)  # the digest the router has read
        self.failing: str | None = None  # why the last try failed, said once
        self.unreadable = 0  # looks in a row that could not read the preset

    def step(self) -> str | None:
        """Look once; what to log, if anything."""
        now = digest(self.preset)
        if now is None:
            self.unreadable += 1
            return f"cannot read the preset {self.preset}; looking again" \
                if self.unreadable == UNREADABLE_LOOKS else None
        self.unreadable = 0
        if now == self.applied:
            return None
        why = self.reload()
        if why is None:
            said = self.applied is not None
            self.applied, self.failing = now, None
            return f"the router read the preset again ({now[:12]})" if said else \
                f"the router holds the preset ({now[:12]})"
        if why == self.failing:
            return None
        self.failing = why
        return f"the preset ({now[:12]}) is not read yet: {why}; trying again"


@click.command(name="pool-reload")
@click.option("--preset", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The pool's preset file (its ConfigMap, mounted as a directory).")
@click.option("--engine", required=True, metavar="URL",
              help="llama-server's router in the pod, e.g. http://127.0.0.1:8000.")
@click.option("--every", default=2.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds between two looks at the preset.")
def pool_reload(preset: Path, engine: str, every: float) -> None:
    """Tell a pool's llama-server router to read its preset again whenever the file changes.

    \b
    Runs in a llama.cpp pool's pod until SIGTERM. The router unloads a member whose
    section changed or went, adds a new one, and leaves the others serving.
    \b
    Example:
      llmop pool-reload --preset /etc/llmop-pool/models.ini --engine http://127.0.0.1:8000
    """
    stopped = threading.Event()

    def stop(signum: int, frame: FrameType | None) -> None:
        stopped.set()

    looking = PresetWatch(preset, lambda: ask_reload(engine))
    click.echo(f"watching {preset} ({(looking.applied or 'not there yet')[:12]}) for the "
               f"router at {engine}", err=True)

    def watch() -> None:
        while not stopped.wait(every):
            said = looking.step()
            if said:
                click.echo(said, err=True)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    # the looks run beside: a reload waits for the edited member's requests to end, and
    # SIGTERM must not wait for it (the router goes with the pod anyway)
    threading.Thread(target=watch, name="pool-reload", daemon=True).start()
    stopped.wait()
