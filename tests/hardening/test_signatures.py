"""Issue 14, item 8: every public entry point refuses arguments of the wrong type with a TrtkitError that names the
argument and what it accepts (never an AttributeError, TypeError or ValueError from deep inside)."""

import inspect

import pytest

import trtkit
from tests import models
from trtkit.builder.config import CalibrationSettings
from trtkit.builder.profiles import InputShape
from trtkit.errors import TrtkitError, UsageError


class Wrong:
    """An object no argument accepts."""

    def __repr__(self):
        return "<Wrong>"


SKIPPED = {"trt", "cuda", "self"}  # test seams: the tensorrt module and the CUDA wrapper


def _valid_args():
    model = models.tiny_conv()
    return {
        "build": (trtkit.build, {"model": model, "config": None}),
        "BuildConfig": (trtkit.BuildConfig, {}),
        "CalibrationSettings": (CalibrationSettings, {}),
        "Profile": (trtkit.Profile, {"shapes": {}}),
        "InputShape": (InputShape, {"min": (1, 3), "opt": (2, 3), "max": (4, 3)}),
        "parse_shapes": (trtkit.parse_shapes, {"text": "x:1x3"}),
        "load_engine": (trtkit.load_engine, {"path_or_bytes": "missing.engine"}),
        "TrtRunner": (trtkit.TrtRunner, {"engine": b"engine bytes"}),
        "prepare": (trtkit.prepare, {"model": model}),
    }


def _cases():
    public = {n for n in trtkit.__all__ if callable(getattr(trtkit, n)) and n != "TrtkitError"} | {
        "CalibrationSettings", "InputShape"}
    valid = _valid_args()
    assert public == set(valid), f"a public callable without a case here: {public ^ set(valid)}"
    for name, (func, args) in sorted(valid.items()):
        for param in inspect.signature(func).parameters.values():
            if param.name in SKIPPED or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            yield pytest.param(func, args, param.name, id=f"{name}-{param.name}")


@pytest.mark.parametrize("func, args, param", list(_cases()))
def test_a_wrong_type_names_the_argument(func, args, param):
    if func is CalibrationSettings:  # a plain dataclass, checked when a BuildConfig is made with it
        def func(**kwargs):
            return trtkit.BuildConfig(precision="int8", calibration=CalibrationSettings(**kwargs))
    with pytest.raises(TrtkitError) as info:
        func(**{**args, param: Wrong()})
    err = info.value
    assert isinstance(err, UsageError), repr(err)
    assert err.field is not None and err.field.split(".")[-1] == param, (err.field, str(err))
    assert param in str(err) and "<Wrong>" in str(err) and err.accepted, str(err)


@pytest.mark.parametrize("call, field, accepted", [
    (lambda: trtkit.build(models.tiny_conv(), "fp16"), "config", "BuildConfig(precision='fp16')"),
    (lambda: trtkit.BuildConfig(workspace_bytes="4G"), "workspace_bytes", "an integer >= 1"),
    (lambda: trtkit.BuildConfig(timing_cache=123), "timing_cache", "a file path"),
    (lambda: trtkit.parse_shapes(None), "text", "profile text"),
    (lambda: trtkit.BuildConfig(profiles="images:1x3x8x8"), "profiles", "a list of Profile"),
    (lambda: trtkit.build(models.tiny_conv(), output=123), "output", "a file path"),
    (lambda: trtkit.BuildConfig(tactic_sources="CUDNN"), "tactic_sources", "a list or tuple of names"),
    (lambda: trtkit.TrtRunner(b"x", cuda_graph="yes"), "cuda_graph", "True or False"),
    (lambda: trtkit.BuildConfig(optimization_level=True), "optimization_level", "an integer from 0 to 5"),
    (lambda: trtkit.BuildConfig(precision="int8", calibration=CalibrationSettings(batch_size=0)),
     "calibration.batch_size", "an integer >= 1"),
])
def test_the_cases_new_users_hit(call, field, accepted):
    with pytest.raises(UsageError) as info:
        call()
    assert info.value.field == field and accepted in str(info.value), str(info.value)


def test_profile_text_in_a_list_is_parsed():
    config = trtkit.BuildConfig(profiles=["images:1x3x8x8,2x3x8x8,4x3x8x8"])
    assert config.profiles[0].shapes["images"].opt == (2, 3, 8, 8)
