"""Issue 14's hardening tests: one helper to run the CLI in-process."""


def run_cli(argv, capsys):
    """``(exit code, stdout, stderr)`` of ``trtkit ARGV`` run in this process."""
    from trtkit.cli import main as cli_main

    code = cli_main.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err
