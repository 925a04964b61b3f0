"""Near-duplicate prompts: normalised text, word shingles, MinHash signatures and LSH banding.

Normalising and shingling are SQL (DuckDB hashes each shingle to 64 bits); the MinHash
permutations, the banding and the grouping are NumPy over whole arrays. Identical normalised
prompts are one document, so exact duplicates cost nothing extra and always group.

Candidates come from 16 bands of 4 rows (64 permutations): a pair with Jaccard similarity 0.8 is
a candidate with probability 0.9998, one at 0.5 with 0.64, so thresholds below 0.5 miss pairs.
Each candidate pair is kept when its estimated similarity (the share of equal signature values)
reaches the threshold; groups are the connected components of the kept pairs."""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass

import numpy as np

PERMUTATIONS = 64
BANDS = 16
ROWS = PERMUTATIONS // BANDS
SHINGLE_WORDS = 3
#: shingles hashed per block: a block's permutation matrix is rows x 64 x 8 bytes (128 MB)
BLOCK = 250_000


def normalised_sql(column: str) -> str:
    """Lower case, every run of characters other than letters and digits as one space."""
    return f"trim(regexp_replace(lower({column}), '[^\\pL\\pN]+', ' ', 'g'))"


def _shingles_sql(documents: str) -> str:
    """(doc, h): the distinct 64-bit hashes of each document's word 3-grams (the whole text when
    it has fewer words), ordered by doc. `documents` yields (doc, text)."""
    n = SHINGLE_WORDS
    return f"""
        WITH words AS (SELECT doc, text, string_split(text, ' ') AS w FROM ({documents})),
        shingles AS (
            SELECT doc, unnest(CASE WHEN len(w) <= {n} THEN [text]
                    ELSE [array_to_string(w[i:i + {n - 1}], ' ')
                          for i in range(1, len(w) - {n - 2})] END) AS shingle
            FROM words
        )
        SELECT DISTINCT doc, hash(shingle) AS h FROM shingles ORDER BY doc
    """


def _coefficients(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Odd multipliers and offsets of the multiply-shift hash family, derived from the seed."""
    digest = b"".join(
        hashlib.blake2b(f"minhash-{seed}-{i}".encode(), digest_size=16).digest()
        for i in range(PERMUTATIONS)
    )
    values = np.frombuffer(digest, dtype=np.uint64).reshape(PERMUTATIONS, 2)
    return values[:, 0] | np.uint64(1), values[:, 1]


def signatures(doc: np.ndarray, h: np.ndarray, documents: int, seed: int = 0) -> np.ndarray:
    """MinHash signatures (documents x PERMUTATIONS, uint32) from (doc, shingle hash) pairs
    sorted by doc; every document 0..documents-1 must have at least one shingle."""
    a, b = _coefficients(seed)
    out = np.empty((documents, PERMUTATIONS), dtype=np.uint32)
    starts = np.flatnonzero(np.r_[True, doc[1:] != doc[:-1]])
    # Blocks end on document boundaries, so each block's reduceat gives whole documents.
    bounds = [*starts[:: max(1, len(starts) * BLOCK // max(len(h), 1))], len(h)]
    for lo, hi in itertools.pairwise(bounds):
        block = (h[lo:hi, None] * a + b) >> np.uint64(32)  # uint64 arithmetic wraps
        first = starts[(starts >= lo) & (starts < hi)]
        out[doc[first]] = np.minimum.reduceat(block, first - lo, axis=0)
    return out


def _band_keys(signature: np.ndarray) -> np.ndarray:
    """One 64-bit key per (document, band): the band's rows mixed by fixed odd multipliers."""
    mix = np.array(
        [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63],
        dtype=np.uint64,
    )[:ROWS]
    rows = signature.astype(np.uint64).reshape(len(signature), BANDS, ROWS)
    return (rows * mix).sum(axis=2, dtype=np.uint64)


def candidate_pairs(signature: np.ndarray) -> np.ndarray:
    """Unique (i, j), i < j, of documents sharing any band key: each document of a run of equal
    keys paired with the run's first."""
    pairs = []
    keys = _band_keys(signature)
    for band in range(BANDS):
        order = np.argsort(keys[:, band], kind="stable")
        sorted_keys = keys[order, band]
        new_run = np.r_[True, sorted_keys[1:] != sorted_keys[:-1]]
        run_first = order[np.maximum.accumulate(np.where(new_run, np.arange(len(order)), 0))]
        member = ~new_run
        pairs.append(np.stack([run_first[member], order[member]], axis=1))
    if not pairs:
        return np.empty((0, 2), dtype=np.int64)
    found = np.concatenate(pairs)
    found.sort(axis=1)
    return np.unique(found, axis=0)


def components(count: int, edges: np.ndarray) -> np.ndarray:
    """Connected-component label (the smallest member) of each of `count` nodes."""
    labels = np.arange(count)
    if len(edges) == 0:
        return labels
    a, b = edges[:, 0], edges[:, 1]
    while True:
        low = np.minimum(labels[a], labels[b])
        before = labels.copy()
        np.minimum.at(labels, a, low)
        np.minimum.at(labels, b, low)
        labels = labels[labels]  # jump to the label's label: fewer rounds on long chains
        if np.array_equal(labels, before):
            return labels


@dataclass(frozen=True, slots=True)
class Groups:
    """`label[doc]`: the group of each document (its smallest member); `similarity[label]`: the
    lowest estimated similarity of the pairs that joined the group (1.0 for a lone document)."""

    label: np.ndarray
    similarity: np.ndarray


def group_documents(con, documents_sql: str, count: int, *, threshold: float, seed: int = 0):
    """Group the `count` documents of `documents_sql` (doc 0..count-1, text) whose estimated
    Jaccard similarity of word 3-grams reaches `threshold`."""
    if count == 0:
        return Groups(np.empty(0, dtype=np.int64), np.empty(0))
    arrays = con.execute(_shingles_sql(documents_sql)).fetchnumpy()
    doc, h = np.asarray(arrays["doc"], dtype=np.int64), np.asarray(arrays["h"], dtype=np.uint64)
    signature = signatures(doc, h, count, seed)
    pairs = candidate_pairs(signature)
    estimate = (signature[pairs[:, 0]] == signature[pairs[:, 1]]).mean(axis=1)
    close = estimate >= threshold
    kept = pairs[close]
    label = components(count, kept)
    similarity = np.ones(count)
    np.minimum.at(similarity, label[kept[:, 0]], estimate[close])
    return Groups(label, similarity)
