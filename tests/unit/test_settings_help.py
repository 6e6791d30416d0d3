"""A setting's help that names a command names one the command line has (`appliance snmp user-add`, not the
`appliance snmp user add` it once said)."""

from __future__ import annotations

import re

import pytest

from appliance.cli import build_parser
from appliance.settings import BY_NAME, SETTINGS

COMMAND = re.compile(r"`(appliance [^`]+)`")


def parses(command: str) -> bool:
    words = command.split()[1:]
    try:
        build_parser().parse_args(words)
    except SystemExit:
        # a command that needs more arguments (a user name, a file): enough that its words up to there are known
        try:
            build_parser().parse_args([*words, "--help"])
        except SystemExit as exc:
            return exc.code == 0
        return False
    return True


def test_the_snmp_users_file_help_names_user_add() -> None:
    assert "`appliance snmp user-add`" in BY_NAME["snmp.users_file"].help


@pytest.mark.parametrize("command", sorted({c for s in SETTINGS for c in COMMAND.findall(s.help)}))
def test_every_command_a_help_names_exists(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert parses(command), command
    capsys.readouterr()
