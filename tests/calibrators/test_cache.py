"""Calibration cache files: TensorRT's text format round trip and provenance refusals."""

import struct
from pathlib import Path

import pytest

from calibrators.cache import (
    Provenance,
    header_for,
    load_cache,
    parse_cache,
    sidecar_path,
    table_from_amaxes,
    trt_version_code,
    write_cache,
)
from trtkit.errors import CalibrationError

# Written by TensorRT 8.6.1's IInt8EntropyCalibrator2 for a small CNN (values are real float32 scales).
TRT_WRITTEN = b"""TRT-8601-EntropyCalibration2
input: 3c010204
/conv1/Conv_output_0: 3d1ba0c4
/relu1/Relu_output_0: 3d1ba0c4
(Unnamed Layer* 3) [Shuffle]_output: 3c8954bd
logits: 3e0c7a4a
"""


def test_header_version_codes_follow_tensorrt():
    assert trt_version_code((8, 6, 1)) == "8601"
    assert trt_version_code((10, 9, 0)) == "100900"
    assert header_for((8, 6, 0), "entropy") == "TRT-8600-EntropyCalibration2"
    assert header_for((10, 1, 0), "minmax") == "TRT-100100-MinMaxCalibration"


def test_parse_a_cache_written_by_tensorrt_and_write_it_back_byte_for_byte():
    table = parse_cache(TRT_WRITTEN)
    assert table.header == "TRT-8601-EntropyCalibration2"
    assert table.scales["input"] == pytest.approx(struct.unpack("!f", bytes.fromhex("3c010204"))[0])
    assert "(Unnamed Layer* 3) [Shuffle]_output" in table.scales
    assert table.to_text().encode() == TRT_WRITTEN


def test_amax_round_trip_through_hex():
    table = table_from_amaxes({"x": 12.7, "y": 0.5}, (8, 6, 0), "entropy")
    again = parse_cache(table.to_text())
    assert again.amaxes()["x"] == pytest.approx(12.7, rel=1e-6)
    assert again.header == "TRT-8600-EntropyCalibration2"


@pytest.mark.parametrize(
    "text, message",
    [
        (b"", "starts with 'an empty file', not 'TRT-'"),
        (b"hello\nx: 3c010204\n", "starts with 'hello'"),
        (b"TRT-8601-EntropyCalibration2\nx: 3c01zz\n",
         "line 2: 'x: 3c01zz' is not '<tensor name>: <scale as up to 8 hex"),
        (b"TRT-8601-EntropyCalibration2\nx: 3c010a141\n", "line 2: 'x: 3c010a141' is not"),
        (b"TRT-8601-EntropyCalibration2\nno colon here\n", "line 2"),
    ],
)
def test_malformed_caches_are_refused_with_the_line(text, message):
    with pytest.raises(CalibrationError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_cache(text)


def _prov(**changes):
    base = dict(onnx_sha256="a" * 64, tensorrt="8.6.0", algorithm="entropy", preprocess={"scale": 1.0},
                data_digest="d" * 64, batch_size=8, max_samples=100)
    base.update(changes)
    return Provenance(**base)


def test_matching_cache_is_reused(tmp_path):
    path = tmp_path / "model.cache"
    write_cache(path, table_from_amaxes({"x": 1.0}, (8, 6, 0), "entropy"), _prov())
    assert sidecar_path(path).exists()
    table = load_cache(path, _prov(samples=99))
    assert table.amaxes()["x"] == pytest.approx(1.0)


def test_mismatching_cache_lists_every_difference(tmp_path):
    path = tmp_path / "model.cache"
    write_cache(path, table_from_amaxes({"x": 1.0}, (8, 6, 0), "entropy"), _prov())
    with pytest.raises(CalibrationError) as err:
        load_cache(path, _prov(algorithm="minmax", tensorrt="10.0.1", onnx_sha256="b" * 64))
    text = str(err.value)
    assert "does not match this build" in text
    assert "algorithm: cache has 'entropy', this build has 'minmax'" in text
    assert "tensorrt: cache has '8.6.0', this build has '10.0.1'" in text
    assert "onnx_sha256: cache has aaaaaaaaaaaa…, this build has bbbbbbbbbbbb…" in text
    assert "--calib-cache-force" in text
    assert load_cache(path, _prov(algorithm="minmax"), force=True) is not None


def test_cache_without_provenance_is_refused_unless_forced(tmp_path):
    path = tmp_path / "trt.cache"
    path.write_bytes(TRT_WRITTEN)
    with pytest.raises(CalibrationError, match="has no provenance file 'trt.cache.trtkit.json'"):
        load_cache(path, _prov())
    assert "logits" in load_cache(path, _prov(), force=True).scales


def test_missing_cache_means_calibrate(tmp_path):
    assert load_cache(tmp_path / "none.cache", _prov()) is None


def test_unknown_data_identity_is_not_a_difference():
    assert _prov(data_digest=None).differences(_prov()) == []
    assert _prov(preprocess={"scale": 2.0}).differences(_prov()) == [
        'preprocess: cache has {"scale": 2.0}, this build has {"scale": 1.0}'
    ]


def test_a_cache_written_by_tensorrt_860_parses_with_its_unpadded_zeros():
    """ResNet-50's entropy cache as TensorRT 8.6.0 wrote it on the GPU host: constants and weights are ``0``."""
    data = (Path(__file__).resolve().parents[1] / "data" / "trt860_resnet50_entropy2.calib").read_bytes()
    table = parse_cache(data)
    assert table.header == "TRT-8600-EntropyCalibration2"
    assert len(table.scales) == len(data.decode().splitlines()) - 1
    assert table.scales["(Unnamed Layer* 0) [Constant]_output"] == 0.0
    assert table.scales["images"] == pytest.approx(0.036973, rel=1e-4)  # 0x3d177133: amax 4.70 for N(0, 1) input
    amaxes = table.amaxes()
    assert "onnx::Conv_654" not in amaxes and all(a > 0 for a in amaxes.values())
    assert parse_cache(table.to_text()).scales == table.scales
