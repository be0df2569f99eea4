"""One CLI vocabulary: one spelling and one default per option across the commands, no aliases, -v anywhere."""

import pytest

import trtkit
from tests.hardening import run_cli
from trtkit.cli.main import make_parser

# every command that runs an engine, with the arguments it needs to parse
RUNS_AN_ENGINE = {
    "bench": ["bench", "e.engine"],
    "run": ["run", "e.engine"],
    "parity": ["parity", "m.onnx", "e.engine"],
    "serve": ["serve", "e.engine"],
    "export": ["export", "triton", "e.engine", "--repo", "r"],
}


@pytest.mark.parametrize("command", sorted(RUNS_AN_ENGINE))
def test_cuda_graph_is_one_switch_on_by_default_everywhere(command):
    parser, argv = make_parser(command), RUNS_AN_ENGINE[command]
    assert parser.parse_args(argv).cuda_graph is True
    assert parser.parse_args([*argv, "--no-cuda-graph"]).cuda_graph is False
    assert parser.parse_args([*argv, "--cuda-graph"]).cuda_graph is True


def test_the_runner_replays_graphs_by_default_as_the_cli_does():
    import inspect

    assert inspect.signature(trtkit.TrtRunner).parameters["cuda_graph"].default is True


@pytest.mark.parametrize("argv", [
    ["build", "{m}", "--profile", "x:1x3x8x8"],
    ["run", "e.engine", "--use-profile", "1"],
    ["bench", "e.engine", "--use-profile", "1"],
    ["parity", "{m}", "e.engine", "--use-profile", "1"],
    ["export", "triton", "e.engine", "--repo", "r", "--no-cuda-graphs"],
])
def test_older_spellings_are_unknown_options(argv, tmp_path, capsys):
    code, _, err = run_cli([a.format(m=tmp_path / "m.onnx") for a in argv], capsys)
    assert code == 2 and "unrecognized arguments" in err, err


def test_build_engine_is_not_a_second_name_of_build():
    assert "build_engine" not in trtkit.__all__
    with pytest.raises(AttributeError):
        trtkit.build_engine  # noqa: B018


@pytest.mark.parametrize("command", ["bench", "parity", "run"])
def test_profile_index_is_one_option_with_one_destination(command):
    argv = RUNS_AN_ENGINE[command]
    assert make_parser(command).parse_args([*argv, "--profile-index", "2"]).profile_index == 2


@pytest.mark.parametrize("argv", [["build", "m.onnx"], ["export", "triton", "e.engine", "--repo", "r"],
                                  ["eval", "classification", "e.engine", "--images", "d"]])
def test_verbose_before_or_after_the_subcommand(argv):
    parser = make_parser(argv[0])
    assert parser.parse_args(argv).verbose is False
    assert parser.parse_args(["-v", *argv]).verbose is True
    assert parser.parse_args([*argv, "-v"]).verbose is True
    assert parser.parse_args([*argv, "--verbose"]).verbose is True


def test_verbose_after_the_subcommand_shows_the_traceback(tmp_path, capsys):
    code, out, err = run_cli(["build", str(tmp_path / "missing.onnx"), "-v"], capsys)
    assert code == 1 and "Traceback" in out + err and "does not exist" in err
