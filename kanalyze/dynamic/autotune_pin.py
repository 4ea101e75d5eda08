"""A variant of the candidate runs the autotune configs the candidate chose (worker side; imports triton).

ORD001's reversed-order variant (reverse_order.py) runs in a worker of its own,
whose autotuner would time the configs again and may choose another one: a
different block size sums in a different order, and the bits would differ for
a reason that is not program order.  The trusted side therefore sends the
variant's case the launch settings that the candidate's own worker recorded on
the same inputs (recording.LaunchCounter: each kernel's scalar launch keywords,
its chosen config's among them), and `install()` makes every autotuner keep
only the configs those settings name before it tunes.  Both sides' settings
come back with the runs; the gate compares bits only where they are the same.
"""

from __future__ import annotations

import functools

from kanalyze.dynamic.recording import config_settings, kernel_name

_installed = False
PINS: dict[str, list[dict]] = {}   # kernel name -> launch settings to keep (set per case: `pin`)


def pin(settings: dict | None) -> None:
    """The launch settings of the case about to run (None: tune as the kernel says)."""
    PINS.clear()
    for name, launches in (settings or {}).items():
        if isinstance(name, str) and isinstance(launches, list):
            PINS[name] = [s for s in launches if isinstance(s, dict)]


def _named(config, settings: list[dict]) -> bool:
    wanted = config_settings(config)
    return any(all(k in launch and launch[k] == v for k, v in wanted.items()) for launch in settings)


def install() -> None:
    """Autotuners made before or after keep only the pinned configs, where some are pinned."""
    global _installed
    if _installed:
        return
    from triton.runtime.autotuner import Autotuner

    original = Autotuner.run

    @functools.wraps(original)
    def run(tuner, *args, **kwargs):
        written = tuner.__dict__.setdefault("_kanalyze_configs", list(tuner.configs))
        settings = PINS.get(kernel_name(tuner))
        kept = [config for config in written if _named(config, settings)] if settings else []
        tuner.configs = kept or written   # none named: it tunes as written, and the settings will differ
        return original(tuner, *args, **kwargs)

    Autotuner.run = run
    _installed = True
