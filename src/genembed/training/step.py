"""One optimizer step: ``grad_accum`` micro-batches (contrastive or single-text), the backward passes, the
clipped update and the step's metrics record (averaged over the processes)."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from typing import Any

import torch

from .data.generative import GenerativeBatch
from .forward import tokenize_texts
from .grad_cache import grad_cache_single, grad_cache_step
from .losses.registry import teacher_needs, term_names
from .run import Run

__all__ = ["train_step"]


def train_step(run: Run, step: int) -> dict[str, Any]:
    """One optimizer step over ``grad_accum`` micro-batches; returns its metrics record."""
    tc, accelerator = run.cfg.train, run.accelerator
    device, rank, world = accelerator.device, run.rank, run.world
    gathered = run.cfg.loss.cross_device_negatives and world > 1
    t_step = time.perf_counter()
    sums: dict[str, torch.Tensor] = {}
    sources: Counter[str] = Counter()
    kind = run.source(step)
    for micro in range(tc.grad_accum):
        if kind == "single":
            terms = _single_micro_step(run, micro == tc.grad_accum - 1, _generative_batch(run, every_step=True))
            sources.update(run.single.last_rows)
            for key, value in terms.items():
                if key != "objective":
                    sums[key] = sums.get(key, 0) + value.detach().float() / tc.grad_accum
            continue
        batch = run.contrastive.next()
        sources.update(run.contrastive.last_rows)
        local = batch.shard(rank, world)
        targets = batch if gathered else local
        queries, documents = _tokenize(run.tokenizer, local, run.prompt_format, run.cfg.embedding)
        mask = targets.mask_tensor()
        inputs = (
            queries.to(device),
            documents.to(device),
            targets.label_tensor().to(device),
            None if mask is None else mask.to(device),
            _generative_batch(run),
        )
        # the teacher scores the queries and documents the labels index: the global batch's when gathered
        teacher, needs = {}, teacher_needs(run.cfg.loss)
        if run.targets is not None and needs:
            teacher = run.targets.batch_inputs(targets, device, vectors="vectors" in needs)
        elif run.teacher is not None:
            teacher = run.teacher.batch_inputs(targets, device)
        if tc.grad_cache_chunk:  # single process (checked in build_run)
            terms = grad_cache_step(
                run.objective,
                *inputs,
                chunk=tc.grad_cache_chunk,
                scale=1 / tc.grad_accum,
                autocast=run.autocast,
                **teacher,
            )
        else:
            sync = micro == tc.grad_accum - 1
            with contextlib.nullcontext() if sync else accelerator.no_sync(run.objective):
                with run.autocast():
                    terms = run.objective(*inputs, **teacher)
                accelerator.backward(terms["objective"] / tc.grad_accum)
        for key, value in terms.items():
            if key != "objective":
                sums[key] = sums.get(key, 0) + value.detach().float() / tc.grad_accum
    grad_norm = accelerator.clip_grad_norm_(run.params, tc.max_grad_norm) if tc.max_grad_norm > 0 else None
    lr = run.scheduler.get_last_lr()[0]
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    record = _record(step, accelerator.reduce(_flatten(sums), reduction="mean"), lr, grad_norm, t_step)
    record["rows"] = dict(sources.most_common())  # which files the step's (global) batches came from
    record["objective"] = kind
    return record


def _generative_batch(run: Run, every_step: bool = False) -> GenerativeBatch | None:
    """This process's share of the next generative batch, on the device; None without generative data, or
    on a single-text step (``every_step``) unless ``generative.every_step`` asks for one there too."""
    if run.generative is None or (every_step and not run.cfg.generative.every_step):
        return None
    rows = run.generative.next_rows()
    per = len(rows) // run.world
    batch = run.generative.collate(rows[run.rank * per : (run.rank + 1) * per])
    return None if batch is None else batch.to(run.accelerator.device)


def _single_micro_step(run: Run, sync: bool, generative: GenerativeBatch | None) -> dict[str, torch.Tensor]:
    """Embed this process's share of a single-text batch (each text bare or under its row's instruction,
    ``single.instruction``) and backpropagate the teacher's losses against the cached vectors (a KL over the
    local texts' similarities, the regression), and the generative loss of ``generative`` if given."""
    tc, accelerator, device = run.cfg.train, run.accelerator, run.accelerator.device
    texts, instructions = run.single.next()
    per = len(texts) // run.world
    mine = slice(run.rank * per, (run.rank + 1) * per)
    local = texts[mine]
    batch = tokenize_texts(
        run.tokenizer, local, instructions[mine], prompt_format=run.prompt_format, max_length=run.cfg.single.max_length
    ).to(device)
    vectors = run.targets.vectors(local).to(device)  # (B, T)
    if tc.grad_cache_chunk:
        return grad_cache_single(
            run.objective,
            batch,
            vectors,
            generative,
            chunk=tc.grad_cache_chunk,
            scale=1 / tc.grad_accum,
            autocast=run.autocast,
        )
    with contextlib.nullcontext() if sync else accelerator.no_sync(run.objective):
        with run.autocast():
            terms = run.objective(texts=batch, teacher_texts=vectors, generative=generative)
        accelerator.backward(terms["objective"] / tc.grad_accum)
    return terms


def _tokenize(tokenizer: Any, batch: Any, prompt_format: str, emb: Any) -> tuple[Any, Any]:
    """Left-padded prompts for a contrastive batch's queries and documents."""
    q = tokenize_texts(
        tokenizer, batch.queries, batch.query_instructions, prompt_format=prompt_format, max_length=emb.query_max_length
    )
    d = tokenize_texts(
        tokenizer,
        batch.documents,
        batch.document_instructions,
        prompt_format=prompt_format,
        max_length=emb.doc_max_length,
    )
    return q, d


_HEAD = ("loss", "rep", "reg", "gen")


def _flatten(sums: dict[str, torch.Tensor]) -> torch.Tensor:
    """One vector (loss, rep, reg, gen, each registered term, L_1..L_K): one all-reduce averages every metric."""
    head = [sums[key] for key in (*_HEAD, *term_names())]
    return torch.cat([torch.stack(head), sums["step_losses"]])


def _record(step: int, values: torch.Tensor, lr: float, grad_norm: Any, t_step: float) -> dict[str, Any]:
    vals = values.tolist()
    names = (*_HEAD, *term_names())
    record: dict[str, Any] = {"step": step, **dict(zip(names, vals, strict=False))}
    record |= {f"L_{k + 1}": v for k, v in enumerate(vals[len(names) :])}
    record |= {"lr": lr, "grad_norm": None if grad_norm is None else float(grad_norm)}
    record["seconds"] = round(time.perf_counter() - t_step, 4)
    return record
