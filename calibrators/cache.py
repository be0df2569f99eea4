"""Calibration cache files in TensorRT's own text format, and their provenance sidecar.

The cache (readable by TensorRT's calibrators)::

    TRT-8601-EntropyCalibration2
    images: 3c010a14
    /conv1/Conv_output_0: 3d8a5c2e

one line per tensor: its INT8 **scale** (amax / 127) as the hex bits of a float32 (TensorRT leaves out leading
zeros: ``0`` for the constants it quantizes from their values).

The sidecar ``<cache>.trtkit.json`` records where the scales came from (ONNX sha256, TensorRT version, algorithm,
preprocessing, digest of the data list). A cache whose provenance differs from the current build is refused with a
message listing each difference, unless forced; a matching one is reused and calibration is skipped.
"""

from __future__ import annotations

import json
import logging
import struct
from dataclasses import asdict, dataclass, field
from pathlib import Path

from trtkit._atomic import write_bytes_atomic
from trtkit.errors import CalibrationError

logger = logging.getLogger("trtkit")

HEADER_ALGORITHMS = {
    "entropy": "EntropyCalibration2",
    "minmax": "MinMaxCalibration",
}
SIDECAR_SUFFIX = ".trtkit.json"
PROVENANCE_FORMAT = 1


def trt_version_code(version: tuple[int, ...]) -> str:
    """The number TensorRT writes in a cache header: 8.6.1 → ``8601``; 10.9.0 → ``100900``."""
    major, minor, patch = (tuple(version) + (0, 0, 0))[:3]
    if major < 10:
        return str(major * 1000 + minor * 100 + patch)
    return str(major * 10000 + minor * 100 + patch)


def header_for(version: tuple[int, ...], algorithm: str) -> str:
    """Cache header line, e.g. ``TRT-8601-EntropyCalibration2``."""
    return f"TRT-{trt_version_code(version)}-{HEADER_ALGORITHMS.get(algorithm, 'EntropyCalibration2')}"


def scale_to_hex(scale: float) -> str:
    return struct.pack("!f", float(scale)).hex()


def hex_to_scale(text: str) -> float:
    """The float whose bits ``text`` spells in hex, padded or not (``3c010a14``, ``0``)."""
    return struct.unpack("!f", struct.pack("!I", int(text, 16)))[0]


@dataclass
class CalibrationTable:
    """Scales per tensor name, with the cache header."""

    header: str
    scales: dict[str, float] = field(default_factory=dict)

    def amaxes(self) -> dict[str, float]:
        """amax per tensor (scale × 127); tensors with a zero scale (TensorRT writes ``0`` for constants and weights,
        which it quantizes from their values) have no range and are left out."""
        return {name: scale * 127.0 for name, scale in self.scales.items() if scale > 0}

    def to_text(self) -> str:
        lines = [self.header] + [f"{name}: {scale_to_hex(scale)}" for name, scale in self.scales.items()]
        return "\n".join(lines) + "\n"


def _shown(text: str, limit: int = 60) -> str:
    """A line quoted for a message; binary data is described, not echoed (it could hold terminal controls)."""
    if all(c.isprintable() for c in text) and "\ufffd" not in text:
        return f"'{text[:limit]}'"
    return f"binary data ({text[:8].encode('utf-8', 'replace').hex(' ')} ...)"


def parse_cache(data: bytes | str, source: str = "calibration cache") -> CalibrationTable:
    """Parse TensorRT's calibration cache text.

    Raises:
        CalibrationError: no ``TRT-`` header, or a line that is not ``name: <hex float bits>`` (names the line).
        TensorRT writes the bits unpadded (``0`` for constants, ``800000``), trtkit writes 8 digits; both parse.
    """
    text = data.decode("utf-8", errors="replace") if isinstance(data, (bytes, bytearray)) else data
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise CalibrationError(f"{source} is empty: it is not a TensorRT calibration cache.")
    if not lines[0].startswith("TRT-"):
        raise CalibrationError(
            f"{source} is not a TensorRT calibration cache: it starts with {_shown(lines[0])}, not 'TRT-'."
        )
    table = CalibrationTable(header=lines[0])
    for number, line in enumerate(lines[1:], start=2):
        name, sep, value = line.rpartition(":")
        value = value.strip()
        if not sep or not 1 <= len(value) <= 8 or not _is_hex(value):
            raise CalibrationError(
                f"{source}, line {number}: {_shown(line)} is not '<tensor name>: <scale as up to 8 hex digits>'."
            )
        table.scales[name.strip()] = hex_to_scale(value)
    return table


def _is_hex(text: str) -> bool:
    return all(ch in "0123456789abcdefABCDEF" for ch in text)


def table_from_amaxes(amaxes: dict[str, float], version: tuple[int, ...], algorithm: str) -> CalibrationTable:
    """A cache table from amax values (scale = amax / 127)."""
    return CalibrationTable(header_for(version, algorithm), {n: a / 127.0 for n, a in amaxes.items()})


# --- provenance ----------------------------------------------------------------------------------------------------


@dataclass
class Provenance:
    """Where a calibration cache came from; compared field by field before a cache is reused."""

    onnx_sha256: str
    tensorrt: str
    algorithm: str
    preprocess: dict | None = None
    data_digest: str | None = None
    batch_size: int | None = None
    max_samples: int | None = None
    samples: int | None = None
    producer: str = "trtkit"
    format: int = PROVENANCE_FORMAT

    # Fields that decide whether scales are still valid (samples is a result, not a setting).
    COMPARED = ("onnx_sha256", "tensorrt", "algorithm", "preprocess", "data_digest", "max_samples")

    def differences(self, other: "Provenance", fields=None) -> list[str]:
        """Human-readable differences between a stored provenance (self) and the current settings (other).

        Args:
            other: the current settings.
            fields: the fields to compare (default: every setting that decides the scales).
        """
        diffs = []
        for name in fields or self.COMPARED:
            stored, current = getattr(self, name), getattr(other, name)
            if name == "data_digest" and (stored is None or current is None):
                continue
            if stored != current:
                diffs.append(f"{name}: cache has {_short(stored)}, this build has {_short(current)}")
        return diffs

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_json(cls, text: str, source: str = "provenance") -> "Provenance":
        try:
            data = json.loads(text)
            known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
            return cls(**known)
        except (ValueError, TypeError) as exc:
            raise CalibrationError(f"Cannot read the calibration cache provenance {source}: {exc}") from exc


def _short(value) -> str:
    if isinstance(value, str) and len(value) == 64 and _is_hex(value):
        return value[:12] + "…"
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else repr(value)


def sidecar_path(cache_path) -> Path:
    cache_path = Path(cache_path)
    return cache_path.with_name(cache_path.name + SIDECAR_SUFFIX)


def write_cache(cache_path, table_or_bytes, provenance: Provenance) -> None:
    """Write a cache (a :class:`CalibrationTable`, or TensorRT's own bytes) and its provenance sidecar atomically."""
    data = table_or_bytes.to_text().encode() if isinstance(table_or_bytes, CalibrationTable) else bytes(table_or_bytes)
    write_bytes_atomic(Path(cache_path), data)
    write_bytes_atomic(sidecar_path(cache_path), provenance.to_json().encode())


def load_cache(
    cache_path, expected: Provenance | None = None, *, force: bool = False, fields=None
) -> CalibrationTable | None:
    """Load a cache if it exists and matches ``expected``.

    Args:
        cache_path: the cache file.
        expected: provenance of the current build (``None``: no check).
        force: use the cache even if its provenance differs or is missing (logs a warning).
        fields: provenance fields to compare (default: all that decide the scales).

    Returns:
        The table, or ``None`` when the file does not exist (calibrate and write it).

    Raises:
        CalibrationError: the cache has no provenance or a different one (lists every difference and how to proceed),
            or cannot be parsed.
    """
    cache_path = Path(cache_path)
    if not cache_path.exists():
        return None
    table = parse_cache(cache_path.read_bytes(), f"Calibration cache '{cache_path}'")
    if expected is None:
        return table
    problems = _provenance_problems(cache_path, expected, fields)
    if problems and not force:
        raise CalibrationError(
            f"Calibration cache '{cache_path}' does not match this build: {'; '.join(problems)}. Delete it to "
            f"recalibrate, point --calib-cache elsewhere, or pass --calib-cache-force to use it anyway."
        )
    if problems:
        logger.warning("Using calibration cache '%s' despite: %s (forced).", cache_path, "; ".join(problems))
    else:
        logger.info("Reusing calibration cache '%s' (provenance matches); calibration skipped.", cache_path)
    return table


def _provenance_problems(cache_path: Path, expected: Provenance, fields) -> list[str]:
    side = sidecar_path(cache_path)
    if not side.exists():
        return [f"it has no provenance file '{side.name}' (it was not written by trtkit, so its origin is unknown)"]
    stored = Provenance.from_json(side.read_text(), f"'{side}'")
    if expected.data_digest is None:
        logger.warning(
            "Calibration data has no identity; the cache '%s' is matched without checking the data.", cache_path
        )
    return stored.differences(expected, fields)
