"""Under CI=true a deploy consistency test may not skip: a renamed module, a missing settings module
or an absent tool fails it with the reason (on a developer machine it skips with the same reason)."""

from __future__ import annotations

import deploy_inventory
import deploy_tools
import pytest


@pytest.fixture
def in_ci(monkeypatch):
    monkeypatch.setattr(deploy_tools, "IN_CI", True)


@pytest.fixture
def not_in_ci(monkeypatch):
    monkeypatch.setattr(deploy_tools, "IN_CI", False)


def test_a_missing_module_fails_under_ci(in_ci):
    with pytest.raises(pytest.fail.Exception, match=r"services\.trainer\.no_such_config.*CI=true"):
        deploy_tools.import_or_fail("services.trainer.no_such_config", "the trainer's config module")


def test_a_missing_module_skips_elsewhere(not_in_ci):
    with pytest.raises(pytest.skip.Exception, match=r"services\.trainer\.no_such_config"):
        deploy_tools.import_or_fail("services.trainer.no_such_config", "the trainer's config module")


def test_an_existing_module_is_returned(in_ci):
    assert deploy_tools.import_or_fail("services.trainer.config", "the trainer's config module").TrainConfig


def test_a_missing_tool_fails_under_ci(in_ci, monkeypatch):
    monkeypatch.setattr(deploy_tools.shutil, "which", lambda name: None)
    with pytest.raises(pytest.fail.Exception, match="no-such-tool not found"):
        deploy_tools.tool("no-such-tool")


def test_a_missing_settings_module_fails_under_ci(in_ci, monkeypatch):
    import test_deploy_settings

    parts = {**deploy_inventory.PART_SETTINGS_MODULES, "renamed": "services.renamed.settings"}
    monkeypatch.setattr(deploy_inventory, "PART_SETTINGS_MODULES", parts)
    inv = deploy_inventory.collect()
    assert "renamed" in inv.missing_parts
    monkeypatch.setattr(test_deploy_settings, "INV", inv)
    with pytest.raises(pytest.fail.Exception, match="services/renamed/settings.py does not exist"):
        test_deploy_settings.part_names("renamed")


def test_every_expected_settings_module_exists():
    assert deploy_inventory.collect().missing_parts == {}
