"""Any number of GNSS receivers: the ``[[gnss]]`` array, ``--set gnssN.KEY``, the names from before the array and
what each was read as, the problems of receivers together, and the console's view of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance import config as cfg
from appliance.config_receivers import RECEIVER_KEYS
from appliance.settings import MAX_RECEIVERS, RECEIVER_SHARED
from appliance.web.settings_edit import SettingsEditor
from tests.unit.test_cli_config import run

TWO = """
[[gnss]]
device = "/dev/ttyACM0"
baud = 115200
cable_delay_ns = 95
epoch_idle_ms = 250

[[gnss]]
device = "/dev/ttyS2"
pps_device = "/dev/pps2"
cable_delay_ns = 140
priority = 2
position = "46.2,6.1,375"
"""


def load(tmp_path: Path, text: str | None = None, *pairs: str) -> cfg.Config:
    path = None
    if text is not None:
        path = tmp_path / "appliance.toml"
        path.write_text(text, encoding="utf-8")
    return cfg.load(None if path is None else str(path), [f"state_dir={tmp_path / 'state'}", *pairs])


def problems(tmp_path: Path, text: str | None = None, *pairs: str) -> list[str]:
    with pytest.raises(cfg.ConfigError) as info:
        load(tmp_path, text, *pairs)
    return info.value.problems


def test_the_embedded_default_is_one_simulated_receiver_named_gnss(tmp_path: Path) -> None:
    (rx,) = load(tmp_path).receivers
    assert (rx.number, rx.name, rx.device, rx.priority, rx.position) == (1, "gnss", "", 1, "")


def test_a_plain_gnss_table_is_one_receiver_and_stays_config_gnss(tmp_path: Path) -> None:
    config = load(tmp_path, '[gnss]\ndevice = "/dev/ttyS1"\nbaud = 38400\n')
    (rx,) = config.receivers
    assert rx.device == config.gnss.device == "/dev/ttyS1" and rx.baud == config.gnss.baud == 38400


def test_each_gnss_table_is_a_receiver_with_its_own_settings_and_the_line_settings_of_the_first(
        tmp_path: Path) -> None:
    config = load(tmp_path, TWO)
    first, second = config.receivers
    assert config.gnss.device == first.device == "/dev/ttyACM0" and config.gnss.cable_delay_ns == 95
    assert (second.number, second.name, second.device, second.pps_device) == (2, "gnss2", "/dev/ttyS2", "/dev/pps2")
    assert (second.cable_delay_ns, second.priority, second.position, second.baud) == (140, 2, "46.2,6.1,375", 9600)
    assert first.epoch_idle_ms == second.epoch_idle_ms == 250  # set once, in the first table, for all
    assert config.origins["gnss2.device"].endswith("appliance.toml")
    assert config.origins["gnss2.baud"] == "default"


def test_a_receiver_has_every_setting_of_the_first_but_how_lines_are_read() -> None:
    assert set(RECEIVER_KEYS) | set(RECEIVER_SHARED) == {f.name.partition(".")[2] for f in cfg.SETTINGS
                                                         if f.name.startswith("gnss.")}
    assert {"name", "device", "baud", "pps_device", "receiver", "configure", "configure_store", "constellations",
            "pulse_length_ms", "priority", "cable_delay_ns", "accuracy_ns", "position"} == set(RECEIVER_KEYS)


def test_names_default_by_place_and_the_first_position_to_the_integrity_home(tmp_path: Path) -> None:
    config = load(tmp_path, '[[gnss]]\n[[gnss]]\nname = "roof"\n[[gnss]]\n[integrity]\nposition = "1,2,3"\n')
    assert [rx.name for rx in config.receivers] == ["gnss", "roof", "gnss3"]
    assert [rx.position for rx in config.receivers] == ["1,2,3", "", ""]


def test_set_addresses_the_first_as_gnss_and_the_nth_as_gnss_n(tmp_path: Path) -> None:
    config = load(tmp_path, TWO, "gnss.baud=9600", "gnss2.baud=38400", "gnss3.device=/dev/ttyS3")
    assert [(rx.name, rx.device, rx.baud) for rx in config.receivers] == [
        ("gnss", "/dev/ttyACM0", 9600), ("gnss2", "/dev/ttyS2", 38400), ("gnss3", "/dev/ttyS3", 9600)]
    assert config.origins["gnss2.baud"] == config.origins["gnss3.device"] == "--set"


def test_set_adds_simulated_receivers_in_order_and_not_past_a_gap(tmp_path: Path) -> None:
    assert [rx.name for rx in load(tmp_path, None, "gnss2.device=", "gnss3.priority=2").receivers] == [
        "gnss", "gnss2", "gnss3"]
    (problem,) = problems(tmp_path, None, "gnss3.device=")
    assert problem.startswith("gnss3.*: there is no receiver 2") and "gnss2.* next" in problem
    (problem,) = problems(tmp_path, None, f"gnss{MAX_RECEIVERS + 1}.device=")
    assert f"at most {MAX_RECEIVERS} receivers" in problem


def test_a_file_writes_the_nth_receiver_as_the_nth_table_not_as_gnss_n(tmp_path: Path) -> None:
    (problem,) = problems(tmp_path, '[gnss2]\ndevice = "/dev/ttyS2"\n')
    assert problem == "gnss2.device: in a file, receiver 2 is the second [[gnss]] table (gnss2.* names it with --set)"


def test_an_unknown_key_in_a_table_is_named_with_what_it_meant(tmp_path: Path) -> None:
    found = problems(tmp_path, '[[gnss]]\ndevise = "x"\n[[gnss]]\ndevise = "/dev/ttyS2"\n')
    assert found[0].startswith("gnss.devise: unknown setting (did you mean gnss.device?)")
    assert found[1].startswith("gnss2.devise: unknown setting of [[gnss]] receiver 2 (did you mean gnss2.device?)")
    (problem,) = problems(tmp_path, None, "gnss2.baudrate=9600")
    assert "did you mean gnss2.baud?" in problem


def test_how_lines_are_read_is_set_in_the_first_table_only(tmp_path: Path) -> None:
    (problem,) = problems(tmp_path, "[[gnss]]\n[[gnss]]\nreconnect_max_s = 5.0\n")
    assert problem.startswith("gnss2.reconnect_max_s: applies to every receiver; set gnss.reconnect_max_s")


@pytest.mark.parametrize("text, words", [
    ("gnss = []\n", "an empty [[gnss]] array"),
    ("gnss = [1]\n", "entry 1 is not a table"),
    ('[[gnss]]\n[[gnss]]\nname = "ptp"\n', "gnss2.name: 'ptp' is the name of another kind of reference"),
    ('[[gnss]]\n[[gnss]]\nname = "Roof Top"\n', "gnss2.name: 'Roof Top' is not a name"),
    ('[[gnss]]\n[[gnss]]\nname = "gnss"\n', "receivers 1 (gnss) and 2 (gnss) both have the name gnss"),
    ('[[gnss]]\nname = "gnss3"\n[[gnss]]\n[[gnss]]\n',
     "receivers 1 (gnss3) and 3 (gnss3) both have the name gnss3"),
    ('[[gnss]]\ndevice = "/dev/a"\n[[gnss]]\ndevice = "/dev/a"\n',
     "receivers 1 (gnss) and 2 (gnss2) both have the device /dev/a"),
    ('[[gnss]]\ndevice = "/dev/a"\npps_device = "/dev/pps0"\n[[gnss]]\ndevice = "/dev/b"\npps_device = "/dev/pps0"\n',
     "both have the PPS device /dev/pps0"),
])
def test_receivers_that_cannot_be_together_are_a_problem_each(tmp_path: Path, text: str, words: str) -> None:
    (problem,) = problems(tmp_path, text)
    assert words in problem


def test_simulated_receivers_and_devices_do_not_mix(tmp_path: Path) -> None:
    (problem,) = problems(tmp_path, '[[gnss]]\n[[gnss]]\ndevice = "/dev/ttyS2"\n')
    assert problem == ("[[gnss]]: receiver 1 (gnss) is simulated (no device) and receiver 2 (gnss2) is on "
                       "/dev/ttyS2: either every receiver has a device or none has (the simulated world)")


def test_three_simulated_receivers_each_their_own(tmp_path: Path) -> None:
    config = load(tmp_path, "[[gnss]]\n[[gnss]]\ncable_delay_ns = 30\n[[gnss]]\npriority = 3\n")
    assert [(rx.device, rx.cable_delay_ns, rx.priority) for rx in config.receivers] == [
        ("", 0, 1), ("", 30, 1), ("", 0, 3)]


# --- the names from before the array ---------------------------------------------------------------------------------
def test_the_old_second_receiver_is_read_as_receiver_two_and_says_so(tmp_path: Path) -> None:
    config = load(tmp_path, '[gnss]\ndevice = "/dev/ttyS1"\n[references]\ngnss_priority = 2\n'
                            'gnss2_device = "/dev/ttyS2"\ngnss2_baud = 38400\ngnss2_pps_device = "/dev/pps2"\n'
                            'gnss2_priority = 3\n')
    assert [(rx.name, rx.device, rx.baud, rx.pps_device, rx.priority) for rx in config.receivers] == [
        ("gnss", "/dev/ttyS1", 9600, "", 2), ("gnss2", "/dev/ttyS2", 38400, "/dev/pps2", 3)]
    assert config.old_names == (
        "references.gnss_priority is read as the priority of [[gnss]] receiver 1 (gnss); write it there",
        "references.gnss2_device is read as the device of [[gnss]] receiver 2 (gnss2); write it there",
        "references.gnss2_baud is read as the line speed (baud) of [[gnss]] receiver 2 (gnss2); write it there",
        "references.gnss2_pps_device is read as the PPS device (pps_device) of [[gnss]] receiver 2 (gnss2); write "
        "it there",
        "references.gnss2_priority is read as the priority of [[gnss]] receiver 2 (gnss2); write it there")


def test_the_old_simulated_second_receiver_is_a_second_table(tmp_path: Path) -> None:
    config = load(tmp_path, "[sim]\ngnss2 = true\n[references]\ngnss2_priority = 2\n")
    assert [(rx.name, rx.device, rx.priority) for rx in config.receivers] == [("gnss", "", 1), ("gnss2", "", 2)]
    assert config.old_names[0].startswith("sim.gnss2 = true is read as a second simulated receiver, [[gnss]] "
                                          "receiver 2 (gnss2")
    assert [rx.name for rx in load(tmp_path, None, "sim.gnss2=true").receivers] == ["gnss", "gnss2"]


def test_old_names_that_say_there_is_no_second_receiver_are_read_as_that(tmp_path: Path) -> None:
    """The defaults of the deploy file before the array: a file copied from it still loads."""
    config = load(tmp_path, '[references]\ngnss_priority = 1\ngnss2_device = ""\ngnss2_baud = 9600\n'
                            'gnss2_pps_device = ""\ngnss2_priority = 1\n[sim]\ngnss2 = false\n')
    assert len(config.receivers) == 1
    assert 'references.gnss2_device = "" is read as no second receiver; remove it' in config.old_names[2]
    assert config.old_names[3].startswith("references.gnss2_baud is ignored: there is no second receiver")
    assert config.old_names[0].startswith("sim.gnss2 = false is read as no second receiver; remove it")


@pytest.mark.parametrize("text, problem", [
    ("[references]\ngnss_priority = 2\n[[gnss]]\npriority = 3\n",
     "references.gnss_priority and gnss.priority both set the priority of [[gnss]] receiver 1 (gnss): remove "
     "references.gnss_priority"),
    ('[references]\ngnss2_device = "/dev/b"\n[[gnss]]\ndevice = "/dev/a"\n[[gnss]]\ndevice = "/dev/c"\n',
     "references.gnss2_device and the [[gnss]] array both configure [[gnss]] receiver 2 (gnss2): remove "
     "references.gnss2_device"),
    ("[references]\ngnss2_priority = 2\n[[gnss]]\n[[gnss]]\n",
     "references.gnss2_priority and the [[gnss]] array both configure [[gnss]] receiver 2 (gnss2): remove "
     "references.gnss2_priority"),
    ("[sim]\ngnss2 = true\n[[gnss]]\n[[gnss]]\n",
     "sim.gnss2 and the [[gnss]] array both configure [[gnss]] receiver 2 (gnss2): remove sim.gnss2"),
    ("[references]\ngnss2_baud = 7\n", "references.gnss2_baud: 7 is not allowed"),
])
def test_an_old_name_beside_the_array_for_the_same_receiver_is_a_problem_naming_both(tmp_path: Path, text: str,
                                                                                       problem: str) -> None:
    (found,) = problems(tmp_path, text)
    assert found.startswith(problem)


def test_set_of_an_old_name_on_a_file_with_the_array_reads_it_as_the_new_one(tmp_path: Path) -> None:
    config = load(tmp_path, TWO, "references.gnss2_priority=4")
    assert config.receivers[1].priority == 4 and config.origins["gnss2.priority"] == "--set"
    assert config.old_names == ("references.gnss2_priority is read as the priority of [[gnss]] receiver 2 (gnss2); "
                                "write it there",)


def test_check_config_and_config_list_say_what_old_names_became(tmp_path: Path, capsys) -> None:
    path = tmp_path / "old.toml"
    path.write_text('state_dir = "%s"\n[gnss]\ndevice = "/dev/ttyS1"\n[references]\ngnss2_device = "/dev/ttyS2"\n'
                    % (tmp_path / "state"), encoding="utf-8")
    code, out, err = run(capsys, "check-config", str(path))
    assert code == 0
    assert (f"{path}: warning: references.gnss2_device is read as the device of [[gnss]] receiver 2 (gnss2); write "
            "it there") in err
    assert "gnss2.device = '/dev/ttyS2'" in out and "2 GNSS receivers: 1 gnss (/dev/ttyS1" in out
    code, out, err = run(capsys, "config", "list", "--config", str(path))
    assert code == 0 and "references.gnss2_device is read as the device" in err
    assert any(line.startswith("gnss2.device ") and "/dev/ttyS2" in line for line in out.splitlines())


# --- rendered, saved from the console ---------------------------------------------------------------------------------
def test_to_toml_writes_the_array_back(tmp_path: Path) -> None:
    config = load(tmp_path, TWO, "gnss3.device=/dev/ttyS3")
    for only_changed in (False, True):
        problems_seen: list[str] = []
        text = cfg.to_toml(config, only_changed)
        assert text.count("[[gnss]]") == 3 and "\n[gnss]" not in text
        again = cfg.merge(cfg.defaults(), cfg.load_text(text, "again", problems_seen), "again",
                          problems=problems_seen)
        assert not problems_seen and dict(again.values) == dict(config.values)


def test_a_console_change_of_the_first_receiver_keeps_the_files_array(tmp_path: Path) -> None:
    path = tmp_path / "appliance.toml"
    path.write_text(TWO, encoding="utf-8")
    config = load(tmp_path, TWO)
    (tmp_path / "state").mkdir()
    editor = SettingsEditor(config, tmp_path / "state", lambda name, value: False)
    assert editor.change("gnss.priority", "3", from_text=True) == (1, 3, False)
    again = load(tmp_path, TWO)
    assert [(rx.name, rx.device, rx.priority) for rx in again.receivers] == [
        ("gnss", "/dev/ttyACM0", 3), ("gnss2", "/dev/ttyS2", 2)]
    assert again.origins["gnss.priority"] == "console" and not again.notes
    assert path.read_text(encoding="utf-8") == TWO


def test_the_console_lists_the_other_receivers_read_only(tmp_path: Path) -> None:
    config = load(tmp_path, TWO)
    (tmp_path / "state").mkdir()
    editor = SettingsEditor(config, tmp_path / "state", lambda name, value: False)
    rows = {r["name"]: r for r in editor.rows()}
    assert rows["gnss2.device"]["value"] == "/dev/ttyS2" and rows["gnss2.device"]["start_only"]
    assert rows["gnss2.priority"]["start_only"] and not rows["gnss.priority"]["start_only"]
    assert "gnss3.device" not in rows and "gnss2.epoch_idle_ms" not in rows
    with pytest.raises(ValueError, match="gnss2.priority is set only in the configuration file or with --set"):
        editor.change("gnss2.priority", "1", from_text=True)
    with pytest.raises(ValueError, match="did you mean gnss.priority"):
        editor.change("references.gnss_priority", "1", from_text=True)


def test_a_priority_an_older_release_saved_from_the_console_still_applies(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / cfg.CONSOLE_FILE).write_text("[references]\ngnss_priority = 4\n", encoding="utf-8")
    config = load(tmp_path)
    assert config.receivers[0].priority == 4 and not config.notes
    assert config.old_names == ("references.gnss_priority is read as the priority of [[gnss]] receiver 1 (gnss); "
                                "write it there",)
    editor = SettingsEditor(config, state, lambda name, value: False)
    editor.change("ntp.rate_limit_burst", "40", from_text=True)  # rewrites the file: the old name stays in it
    assert load(tmp_path).receivers[0].priority == 4


def test_a_console_file_cannot_make_receivers(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / cfg.CONSOLE_FILE).write_text('[[gnss]]\ndevice = "/dev/x"\n[[gnss]]\n', encoding="utf-8")
    config = load(tmp_path)
    assert len(config.receivers) == 1 and config.gnss.device == ""
    assert any("[[gnss]] receivers are set only in the configuration file" in n for n in config.notes)
