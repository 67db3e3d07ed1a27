# SPDX-License-Identifier: Apache-2.0
"""Plan-level API of cuDNN Frontend: knobs, notes, the kernel cache and device properties.

* ``knob_type``, ``knob``: what ``pygraph.get_knobs_for_engine(engine_id)`` returns and
  ``pygraph.create_execution_plan(engine_id, {knob_type: value})`` takes.
* ``behavior_note``, ``numerical_note``: what is true of a plan (``get_behavior_notes*``) and what
  ``select_*_notes`` / ``deselect_*_notes`` filter on.
* ``create_kernel_cache()``: built plans by graph; a ``pygraph(kernel_cache=...)`` built again reuses
  the plan without planning. ``serialize()`` gives JSON text, ``deserialize(text)`` loads it into an
  empty cache.
* ``create_device_properties(device_id | json)``: the device plans are made for, so that a graph can be
  built (and serialized) where that device is absent: ``pygraph(device_property=props)``.
"""

import json

from . import _C
from ._C import behavior_note, create_kernel_cache, kernel_cache, knob, knob_type, numerical_note  # noqa: F401

_KINDS = {"cpu": _C.device_kind.CPU, "cuda": _C.device_kind.CUDA}


class device_properties:
    """A device to plan for: its kind, ordinal, SM version and SM count."""

    _FIELDS = ("kind", "device_id", "sm_version", "sm_count")

    def __init__(self, kind="cuda", device_id=0, sm_version=0, sm_count=0):
        if kind not in _KINDS:
            raise ValueError(f"device_properties: kind must be one of {sorted(_KINDS)}, not {kind!r}")
        for name, v in (("device_id", device_id), ("sm_version", sm_version), ("sm_count", sm_count)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"device_properties: {name} must be a non-negative int, not {v!r}")
        if kind == "cuda" and sm_version <= 0:
            raise ValueError("device_properties: a cuda device needs its sm_version (e.g. 90)")
        self.kind, self.device_id, self.sm_version, self.sm_count = kind, device_id, sm_version, sm_count

    def serialize(self) -> str:
        """JSON text that create_device_properties() reads back to an equal object."""
        return json.dumps({f: getattr(self, f) for f in self._FIELDS}, sort_keys=True)

    def _target(self):
        return _C.Target(_KINDS[self.kind], self.device_id, self.sm_version, self.sm_count)

    def __eq__(self, other):
        return isinstance(other, device_properties) and self.serialize() == other.serialize()

    def __repr__(self):
        return f"<opendnn.device_properties {self.serialize()}>"


def create_device_properties(device):
    """Properties of CUDA device ``device`` (an int; the device must be visible), or of the device the
    JSON text from ``device_properties.serialize()`` describes (no device needed)."""
    if isinstance(device, bool):
        raise TypeError("create_device_properties takes a device id (int) or JSON text (str)")
    if isinstance(device, int):
        t = _C._probe_device_properties(device)
        return device_properties("cuda", device, t.sm_version, t.sm_count)
    if isinstance(device, (bytes, bytearray)):
        device = device.decode()
    if not isinstance(device, str):
        raise TypeError("create_device_properties takes a device id (int) or JSON text (str)")
    try:
        d = json.loads(device)
    except json.JSONDecodeError as e:
        raise ValueError(f"device properties: not JSON: {e}") from None
    if not isinstance(d, dict) or set(d) != set(device_properties._FIELDS):
        raise ValueError(f"device properties: expected an object with exactly {list(device_properties._FIELDS)}")
    return device_properties(d["kind"], d["device_id"], d["sm_version"], d["sm_count"])
