from __future__ import annotations

from typer.testing import CliRunner

from genembed.cli.app import app

runner = CliRunner()


def test_inspect_on_a_local_hf_folder(tmp_path, tiny):
    tiny.model.save_pretrained(tmp_path)
    tiny.tokenizer.save_pretrained(tmp_path)
    result = runner.invoke(app, ["inspect", "hello there", "--model", str(tmp_path), "--steps", "3", "--top", "2"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip().startswith("│ ")]
    assert len(lines) == 3  # one row per step


def test_missing_model_is_a_clean_error(tmp_path):
    result = runner.invoke(app, ["inspect", "x", "--model", str(tmp_path / "missing")])
    assert result.exit_code == 2
    assert "does not exist" in result.output
    assert "Traceback" not in result.output


def test_version_comes_from_one_place():
    from importlib.metadata import version

    import genembed

    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0 and result.output.strip() == genembed.__version__ == version("genembed")
