from __future__ import annotations

from pathlib import Path

import pytest

from genembed.training.config import ConfigError, RunConfig, apply_overrides, config_from_dict, load_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_defaults_and_yaml_with_overrides(tmp_path):
    assert RunConfig().loss.temperature == 0.02 and RunConfig().loss.reg_weight == 1.0
    assert RunConfig().lora.target_modules == "all-linear"
    path = tmp_path / "sub" / "run.yaml"
    path.parent.mkdir()
    path.write_text(
        "embedding: {steps: 7}\n"
        "data:\n  files:\n    - a.jsonl\n    - {path: /abs/b.jsonl, weight: 2, symmetric: true}\n"
        "train: {lr: 3e-4}\n"
    )
    cfg = load_config(path, ["loss.temperature=0.05", "lora.target_modules=[q_proj, v_proj]", "train.threads=2"])
    assert cfg.embedding.steps == 7 and cfg.train.lr == 3e-4  # "3e-4" is a string in YAML 1.1
    assert cfg.loss.temperature == 0.05 and cfg.lora.target_modules == ["q_proj", "v_proj"] and cfg.train.threads == 2
    assert cfg.data.files[0].path == str(path.parent / "a.jsonl")  # relative to the config file
    assert (cfg.data.files[1].path, cfg.data.files[1].weight, cfg.data.files[1].symmetric) == (
        "/abs/b.jsonl",
        2.0,
        True,
    )
    again = apply_overrides(cfg, ["data.files=[c.jsonl]"])
    assert again.data.files[0].path == "c.jsonl"  # command-line paths stay relative to the cwd


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"trian": {}}, "unknown key 'trian'"),
        ({"train": {"lr": "fast"}}, "train.lr must be float, got 'fast'"),
        ({"train": {"max_steps": 2.5}}, "train.max_steps must be int"),
        ({"train": {"max_steps": 0}}, "train.max_steps must be > 0"),
        ({"loss": {"reduction": "max"}}, "loss.reduction must be one of ['mean', 'sum']"),
        ({"embedding": {"method": "bert"}}, "embedding.method must be one of ['gircse', 'mean', 'last', 'grit']"),
        ({"embedding": {"method": "grit", "attention": "bidirectional"}}, "does not apply to grit"),
        ({"embedding": {"method": "mean", "share_prefix": True}}, "embedding.share_prefix needs a soft-token method"),
        ({"embedding": {"attention": "bidirectional", "share_prefix": True}}, "attention 'bidirectional'"),
        (
            {"generative": {"aggregation": "batch"}},
            "generative.aggregation must be one of ['sample', 'token', 'mixed']",
        ),
        ({"generative": {"loss": "kl"}}, "generative.loss must be one of ['next_token', 'base_kl']"),
        ({"generative": {"temperature": 0}}, "generative.temperature must be > 0"),
        ({"lora": {"dropout": 1.0}}, "lora.dropout must be < 1"),
        ({"data": {"files": [{"weight": 1}]}}, "data.files[0]"),
        ({"data": {"files": [{"path": "x", "weight": 0}]}}, "data.files[0].weight must be > 0"),
        ({"data": "x"}, "data must be a mapping"),
    ],
)
def test_errors_name_the_key(raw, message):
    with pytest.raises(ConfigError) as info:
        config_from_dict(raw)
    assert message in str(info.value)


def test_override_syntax_errors():
    with pytest.raises(ConfigError, match="section.key=value"):
        apply_overrides(RunConfig(), ["train.lr"])
    with pytest.raises(ConfigError, match="unknown key 'train.nope'"):
        apply_overrides(RunConfig(), ["train.nope=1"])


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.glob("*.yaml")))
def test_example_configs_load(name):
    cfg = load_config(CONFIGS / name)
    assert cfg.data.files
    if name.startswith("tiny"):
        assert cfg.model.name == "tiny" and all(Path(f.path).is_file() for f in cfg.data.files)


def test_base_file_merges_section_by_section_and_files_plus_appends(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "stages").mkdir()
    (tmp_path / "base.yaml").write_text(
        "embedding: {steps: 5, tau: 1.0}\n"
        "data:\n  files: [data/a.jsonl, {path: data/b.jsonl, symmetric: true}]\n  batch_size: 16\n"
        "train: {lr: 2.0e-4, max_steps: 300}\n"
    )
    (tmp_path / "stages" / "two.yaml").write_text(
        "base: ../base.yaml\nembedding: {steps: 10}\n"
        "data:\n  files+: [{path: ../data/c.jsonl, batch_by_axis: true, weight: 50}]\n"
        "train: {max_steps: 150}\n"
    )
    cfg = load_config(tmp_path / "stages" / "two.yaml")
    assert (cfg.embedding.steps, cfg.embedding.tau) == (10, 1.0)
    assert (cfg.train.max_steps, cfg.train.lr, cfg.data.batch_size) == (150, 2e-4, 16)
    # each file's relative paths are resolved against its own folder
    assert [f.path for f in cfg.data.files] == [str(tmp_path / "data" / n) for n in ("a.jsonl", "b.jsonl", "c.jsonl")]
    assert [(f.symmetric, f.batch_by_axis, f.weight) for f in cfg.data.files] == [
        (False, False, None),
        (True, False, None),
        (False, True, 50.0),
    ]


def test_base_file_errors_name_the_files(tmp_path):
    (tmp_path / "loop-a.yaml").write_text("base: loop-b.yaml\n")
    (tmp_path / "loop-b.yaml").write_text("base: loop-a.yaml\n")
    with pytest.raises(ConfigError, match="base files form a loop"):
        load_config(tmp_path / "loop-a.yaml")
    (tmp_path / "orphan.yaml").write_text("base: missing.yaml\n")
    with pytest.raises(ConfigError, match=r"missing\.yaml \(the base of .*orphan\.yaml\)"):
        load_config(tmp_path / "orphan.yaml")
    (tmp_path / "bad.yaml").write_text("base: orphan.yaml\ndata:\n  files+: not-a-list\n")
    (tmp_path / "orphan.yaml").write_text("data: {files: [a.jsonl]}\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: files\+ appends a list"):
        load_config(tmp_path / "bad.yaml")
