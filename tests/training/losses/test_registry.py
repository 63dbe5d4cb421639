"""The loss registry: the ``loss:`` config keys come from it, ``loss.name`` picks from it, and the
objective adds up whatever terms it builds (a new term needs no edit elsewhere)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from genembed.encoders.settings import EmbedSettings
from genembed.training.config import ConfigError, LossConfig, config_from_dict
from genembed.training.losses import ICRLoss, InfoNCE, LossContext, build_losses
from genembed.training.losses.options import Option
from genembed.training.losses.registry import LOSSES, LossEntry, loss_options, term_labels, term_names
from genembed.training.objective import Objective


def test_the_loss_section_holds_every_registered_key_with_its_default():
    fields = {f.name: f.default for f in dataclasses.fields(LossConfig)}
    assert fields == {option.name: option.default for option in loss_options()}
    for entry in LOSSES.values():
        assert {option.name for option in entry.options} <= set(fields)
    # the keys configs have always used are still there
    assert {"temperature", "reg_weight", "reduction", "distill_weight", "regress_weight", "regress_map_lr"} <= set(
        fields
    )


@pytest.mark.parametrize(
    ("loss", "message"),
    [
        ({"name": "triplet"}, "loss.name must be one of ['icr', 'info_nce'], got 'triplet'"),
        ({"distill_temperature": 0}, "loss.distill_temperature must be > 0"),
        ({"reduction": "max"}, "loss.reduction must be one of ['mean', 'sum']"),
        ({"regress_loss": "l1"}, "loss.regress_loss must be one of ['cosine', 'mse']"),
        ({"reg_weight": -1}, "loss.reg_weight must be >= 0"),
    ],
)
def test_bad_loss_keys_are_refused_by_name(loss, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config_from_dict({"loss": loss})


def test_the_method_picks_the_contrastive_loss_unless_the_config_names_one():
    context = LossContext(hidden_size=8)
    gircse = config_from_dict({})
    assert isinstance(build_losses(gircse.loss, "icr", context)[0], ICRLoss)
    named = config_from_dict({"loss": {"name": "info_nce", "temperature": 0.1}})
    rep, terms = build_losses(named.loss, "icr", context)
    assert isinstance(rep, InfoNCE) and rep.temperature == 0.1 and terms == {}
    with pytest.raises(ValueError, match="loss.name must be one of"):
        build_losses(gircse.loss, "unknown", context)


def test_terms_are_on_when_their_weight_is_and_carry_it():
    cfg = config_from_dict({"loss": {"distill_weight": 0.3, "regress_weight": 0.7, "distill_targets": "t"}})
    _, terms = build_losses(cfg.loss, "icr", LossContext(hidden_size=8, teacher_dimension=4))
    assert list(terms) == ["distill", "regress"]
    assert terms["distill"].weight == 0.3 and terms["regress"].weight == 0.7
    assert terms["regress"].map.weight.shape == (4, 8) and terms["regress"].lr == cfg.loss.regress_map_lr


class _NormPenalty(nn.Module):
    """A new term, as a contributor would add it: the mean squared norm of the embeddings."""

    OPTIONS = (Option("norm_weight", float, 0.0, "> 0: penalise the embeddings' squared norm", "non_negative"),)
    weight = 1.0

    @classmethod
    def from_config(cls, config, context):
        term = cls()
        term.weight = config.norm_weight
        return term

    def on_pairs(self, queries, documents, mask, teacher):
        return torch.cat([queries, documents]).pow(2).sum(-1).mean()

    def on_texts(self, texts, teacher_texts):
        return texts.pow(2).sum(-1).mean()


def test_a_registered_term_is_built_added_and_logged_without_other_edits(monkeypatch):
    monkeypatch.setitem(LOSSES, "norm", LossEntry(_NormPenalty, weight="norm_weight"))
    assert "norm_weight" in {option.name for option in loss_options()} and term_names()[-1] == "norm"
    config = SimpleNamespace(**{o.name: o.default for o in loss_options()} | {"norm_weight": 0.25})
    rep, terms = build_losses(config, "icr", LossContext(hidden_size=8))
    assert list(terms) == ["norm"]
    objective = Objective(None, EmbedSettings(steps=2), rep, terms=terms)
    torch.manual_seed(0)
    q, d = torch.randn(3, 2, 8), torch.randn(6, 2, 8)
    out = objective.representation_terms(q, d, None, None)
    norms = [torch.cat([q[:, k], d[:, k]]).pow(2).sum(-1).mean() for k in range(2)]  # ICR trains both steps
    assert out.terms["norm"].item() == pytest.approx(torch.stack(norms).mean().item(), rel=1e-6)
    assert out.total.item() == pytest.approx(out.rep.item() + 0.25 * out.terms["norm"].item(), rel=1e-6)
    assert set(out.logged()) == {"rep", "step_losses", "reg", "distill", "regress", "norm"}
    assert term_labels() == {"distill": "distillation KL", "regress": "embedding distillation", "norm": "norm"}


def test_every_method_names_a_registered_contrastive_loss():
    from genembed.encoders.methods import METHOD_RULES
    from genembed.training.losses.registry import contrastive_names

    assert {rules.loss for rules in METHOD_RULES.values()} <= set(contrastive_names())


@pytest.mark.parametrize(
    ("loss", "needs"),
    [
        ({}, set()),
        ({"distill_weight": 1.0}, {"scores"}),
        ({"regress_weight": 1.0, "distill_targets": "t"}, {"vectors"}),
        ({"distill_weight": 1.0, "regress_weight": 1.0, "distill_targets": "t"}, {"scores", "vectors"}),
    ],
)
def test_the_teacher_inputs_a_batch_carries_follow_the_terms_that_are_on(loss, needs):
    from genembed.training.losses.registry import teacher_needs

    assert teacher_needs(config_from_dict({"loss": loss}).loss) == needs
