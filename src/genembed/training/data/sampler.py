"""A deterministic stream of batches drawn from several files with per-file weights.

Each file is read as an endless sequence of shuffled passes. A batch is drawn from one file (chosen
by weight) when ``one_file_per_batch`` is set, so in-batch negatives come from the same task and
are harder; a file too small to fill a batch is topped up from the others. Rows that share a key
text with a row already in the batch (e.g. the same query in several rows, as in files with one row
per pair) are held back for a later batch of that file, so a batch never scores a query against a
copy of its own positive.

The stream depends only on the seed and the global batch size, so every process of a multi-process
run draws the same global batches and takes its own slice, and a resumed run skips exactly the
batches it has already used.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Hashable, Sequence

import numpy as np

__all__ = ["FILE_ORDERS", "MixtureSampler", "ShareSchedule"]

# how a batch's file is chosen (config ``file_order``): a random draw by weight, or MixtureSampler's even schedule
FILE_ORDERS = ("random", "even")


class _FileStream:
    """Endless shuffled passes over one file's rows, with a queue of rows held back for later."""

    def __init__(self, size: int, rng: np.random.Generator):
        self.size, self.rng = size, rng
        self.order: list[int] = []
        self.cursor = 0
        self.held: deque[int] = deque()

    def _fresh(self) -> int:
        if self.cursor == len(self.order):
            self.order, self.cursor = self.rng.permutation(self.size).tolist(), 0
        self.cursor += 1
        return self.order[self.cursor - 1]

    def take(self, n: int, used: set[Hashable], keys: Sequence[Sequence[Hashable]] | None) -> list[int]:
        """Up to ``n`` rows whose keys are not in ``used`` (which is updated); looks at most one pass ahead."""
        chosen: list[int] = []
        for _ in range(len(self.held)):
            if len(chosen) == n:
                break
            row = self.held.popleft()
            if not self._accept(row, used, keys, chosen):
                self.held.append(row)
        looked = 0
        while len(chosen) < n and looked < self.size:
            row = self._fresh()
            looked += 1
            if not self._accept(row, used, keys, chosen):
                self.held.append(row)
        return chosen

    def _accept(
        self, row: int, used: set[Hashable], keys: Sequence[Sequence[Hashable]] | None, chosen: list[int]
    ) -> bool:
        # the row itself (a batch that spans two passes could otherwise hold a row twice) and its key texts
        row_keys = [(id(self), row), *(keys[row] if keys is not None else ())]
        if any(k in used for k in row_keys):
            return False
        used.update(row_keys)
        chosen.append(row)
        return True


class MixtureSampler:
    """Batches of ``(file index, row index)`` pairs.

    Args:
        sizes: rows per file.
        weights: sampling weight per file (need not sum to 1).
        batch_size: rows per (global) batch.
        seed: the whole stream follows from it.
        one_file_per_batch: draw each batch from one file where it has enough rows.
        keys: per file, per row, the texts that may occur only once in a batch (None: no constraint).
        shares: per file, a fixed share of the batches (None: drawn by weight from what the files with a
            share leave); the batch's first file then follows a :class:`ShareSchedule` rather than a
            random draw. Needs ``one_file_per_batch``.
        even: every file's batches follow the schedule, the files without a share splitting what the
            others leave by weight, so any run of ``n`` batches gives each file its share of them, give or
            take two (a random draw by weight leaves a file of 1/20 out of 30 batches one time in five).
            The schedule starts at a point set by the seed, so files of small share fall into other
            stretches under other seeds. Needs ``one_file_per_batch``.
    """

    def __init__(
        self,
        sizes: Sequence[int],
        weights: Sequence[float],
        batch_size: int,
        *,
        seed: int,
        one_file_per_batch: bool = True,
        keys: Sequence[Sequence[Sequence[Hashable]]] | None = None,
        shares: Sequence[float | None] | None = None,
        even: bool = False,
    ):
        if not sizes or len(sizes) != len(weights) or min(sizes) < 1:
            raise ValueError("need at least one file, one weight per file, and at least one row per file")
        if min(weights) <= 0:
            raise ValueError(f"weights must be > 0, got {list(weights)}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.one_file_per_batch = one_file_per_batch
        self.keys = keys
        self.probs = np.asarray(weights, dtype=np.float64) / float(np.sum(weights))
        root = np.random.SeedSequence(seed)
        children = root.spawn(len(sizes) + 1)
        self.rng = np.random.default_rng(children[0])
        self.streams = [
            _FileStream(size, np.random.default_rng(c)) for size, c in zip(sizes, children[1:], strict=True)
        ]
        self.batches_drawn = 0
        shared = shares is not None and any(x is not None for x in shares)
        self.schedule = _file_schedule(shares, len(sizes)) if shared else None
        if self.schedule is not None and not one_file_per_batch:
            raise ValueError("file shares choose each batch's file: they need one_file_per_batch")
        self.by_weight = [i for i in range(len(sizes)) if shares is None or shares[i] is None]
        if even:
            if not one_file_per_batch:
                raise ValueError("an even file schedule chooses each batch's file: it needs one_file_per_batch")
            self.schedule = _even_schedule(self.schedule, self.by_weight, self.probs)
            self.by_weight = []
            for _ in range(int(np.random.default_rng([seed, 2]).integers(EVEN_PHASES))):
                self.schedule.next()

    def next_batch(self) -> list[tuple[int, int]]:
        """The next batch; it has ``batch_size`` rows unless all files together cannot supply them."""
        used: set[Hashable] = set()
        batch: list[tuple[int, int]] = []
        if self.one_file_per_batch:
            first = self._first_file()
            order = [first] + [int(i) for i in self._weighted_order(exclude=first)]
            for file in order:
                need = self.batch_size - len(batch)
                if need == 0:
                    break
                batch += [(file, row) for row in self.streams[file].take(need, used, self._keys(file))]
        else:
            files = self.rng.choice(len(self.streams), size=self.batch_size, p=self.probs)
            for file in files.tolist():
                batch += [(file, row) for row in self.streams[file].take(1, used, self._keys(file))]
        self.batches_drawn += 1
        return batch

    def _first_file(self) -> int:
        """The file a batch is drawn from: by weight, or the share schedule's (by weight among the files
        without a share when it says ``rest``)."""
        source = "rest" if self.schedule is None else self.schedule.next()
        if source != "rest":
            return int(source)
        if self.schedule is None:
            return int(self.rng.choice(len(self.streams), p=self.probs))
        p = self.probs[self.by_weight] / self.probs[self.by_weight].sum()
        return int(self.rng.choice(self.by_weight, p=p))

    def skip(self, n: int) -> None:
        """Draw and discard ``n`` batches (to resume where a run stopped)."""
        for _ in range(n):
            self.next_batch()

    def _keys(self, file: int) -> Sequence[Sequence[Hashable]] | None:
        return None if self.keys is None else self.keys[file]

    def _weighted_order(self, exclude: int) -> list[int]:
        """The other files in a weighted random order (for topping up a short batch)."""
        others = [i for i in range(len(self.streams)) if i != exclude]
        if not others:
            return []
        p = self.probs[others] / self.probs[others].sum()
        return self.rng.choice(others, size=len(others), replace=False, p=p).tolist()


class ShareSchedule:
    """Which source each step draws from, so that every source gets a fixed share of the steps.

    Deterministic and evenly spread: step ``s`` (1-based) goes to the source furthest behind its share,
    ``share * s - steps taken so far`` (ties to the earlier source), so after any ``n`` steps each source
    has ``share * n`` steps, give or take one. Nothing random: a resumed run replays the same plan.

    Args:
        shares: source name -> share of the steps (> 0; normalised to sum to 1).

    Example:
        >>> ShareSchedule({"contrastive": 0.25, "single": 0.75}).plan(8)
        ['single', 'contrastive', 'single', 'single', 'single', 'contrastive', 'single', 'single']
    """

    def __init__(self, shares: dict[str, float]):
        if not shares or min(shares.values()) <= 0:
            raise ValueError(f"shares must be > 0, got {shares}")
        total = sum(shares.values())
        self.shares = {name: share / total for name, share in shares.items()}
        self.taken = dict.fromkeys(self.shares, 0)
        self.steps = 0

    def next(self) -> str:
        """The source of the next step."""
        self.steps += 1
        name = max(self.shares, key=lambda n: self.shares[n] * self.steps - self.taken[n])
        self.taken[name] += 1
        return name

    def plan(self, steps: int) -> list[str]:
        """The sources of steps 1..``steps`` (from the start, whatever this schedule has drawn)."""
        fresh = ShareSchedule(self.shares)
        return [fresh.next() for _ in range(steps)]

    def counts(self, steps: int) -> dict[str, int]:
        """Steps each source has had among steps 1..``steps``."""
        taken = Counter(self.plan(steps))
        return {name: taken[name] for name in self.shares}


EVEN_PHASES = 4096  # the even schedule starts after a seed-chosen number of steps below this


def _even_schedule(fixed: ShareSchedule | None, by_weight: list[int], probs: np.ndarray) -> ShareSchedule:
    """:func:`_file_schedule`'s plan (or none) with its ``rest`` split over the files ``by_weight`` by weight, so
    every file is named in it (by index)."""
    planned = dict(fixed.shares) if fixed is not None else {"rest": 1.0}
    rest = planned.pop("rest", 0.0)
    planned |= {str(i): rest * probs[i] / probs[by_weight].sum() for i in by_weight}
    return ShareSchedule(dict(sorted(planned.items(), key=lambda item: int(item[0]))))


def _file_schedule(shares: Sequence[float | None], files: int) -> ShareSchedule:
    """A schedule over the files with a share (named by index) and ``rest`` (the others, by weight)."""
    if len(shares) != files:
        raise ValueError(f"need one share (or None) per file, got {len(shares)} for {files} files")
    fixed = {str(i): float(x) for i, x in enumerate(shares) if x is not None}
    if min(fixed.values()) <= 0:
        raise ValueError(f"file shares must be > 0, got {list(shares)}")
    total = sum(fixed.values())
    rest = files - len(fixed)
    if rest and not total < 1:
        raise ValueError(f"file shares sum to {total:g}, leaving nothing for the {rest} files without a share")
    if not rest and abs(total - 1) > 1e-6:
        raise ValueError(f"every file has a share, so the shares must sum to 1, got {total:g}")
    return ShareSchedule(fixed | ({"rest": 1 - total} if rest else {}))
