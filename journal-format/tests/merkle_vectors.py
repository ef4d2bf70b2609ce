#!/usr/bin/env python3
"""Checks journal-format/tests/merkle_vectors.json with an implementation of its own.

The golden vectors of the journal's Merkle tree (docs/FORMAT.md, "Merkle tree") are written by
the Rust code (`MERKLE_VECTORS_WRITE=1 cargo test -p journal-format --test merkle`). This script
recomputes every hash in them from the definitions alone, sharing no code with the crate: BLAKE3
written out from its specification (inputs of one chunk, at most 1,024 bytes, are all the tree
hashes), and the tree hash, PATH and PROOF of RFC 9162 section 2.1 as the RFC defines them,
recursively. Standard library only.

    python3 journal-format/tests/merkle_vectors.py          # check the file
    python3 journal-format/tests/merkle_vectors.py --print  # print the vectors it computes
"""

import json
import os
import sys

# --- BLAKE3, one chunk --------------------------------------------------------------------------

IV = [0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19]
MSG_PERMUTATION = [2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8]
CHUNK_START, CHUNK_END, ROOT = 1, 2, 8
MASK = 0xFFFFFFFF


def rotr(x, n):
    return ((x >> n) | (x << (32 - n))) & MASK


def g(s, a, b, c, d, mx, my):
    s[a] = (s[a] + s[b] + mx) & MASK
    s[d] = rotr(s[d] ^ s[a], 16)
    s[c] = (s[c] + s[d]) & MASK
    s[b] = rotr(s[b] ^ s[c], 12)
    s[a] = (s[a] + s[b] + my) & MASK
    s[d] = rotr(s[d] ^ s[a], 8)
    s[c] = (s[c] + s[d]) & MASK
    s[b] = rotr(s[b] ^ s[c], 7)


def round_(s, m):
    g(s, 0, 4, 8, 12, m[0], m[1])
    g(s, 1, 5, 9, 13, m[2], m[3])
    g(s, 2, 6, 10, 14, m[4], m[5])
    g(s, 3, 7, 11, 15, m[6], m[7])
    g(s, 0, 5, 10, 15, m[8], m[9])
    g(s, 1, 6, 11, 12, m[10], m[11])
    g(s, 2, 7, 8, 13, m[12], m[13])
    g(s, 3, 4, 9, 14, m[14], m[15])


def compress(cv, block, counter, block_len, flags):
    m = [int.from_bytes(block[4 * i:4 * i + 4], "little") for i in range(16)]
    s = cv[:] + IV[:4] + [counter & MASK, counter >> 32, block_len, flags]
    for r in range(7):
        round_(s, m)
        if r < 6:
            m = [m[i] for i in MSG_PERMUTATION]
    return [s[i] ^ s[i + 8] for i in range(8)]


def blake3(data):
    """BLAKE3 of at most one chunk (1,024 bytes): chunk 0 is the root, 32 bytes out."""
    assert len(data) <= 1024, "one chunk only"
    blocks = [data[i:i + 64] for i in range(0, len(data), 64)] or [b""]
    cv = IV[:]
    for i, block in enumerate(blocks):
        flags = CHUNK_START if i == 0 else 0
        if i == len(blocks) - 1:
            flags |= CHUNK_END | ROOT
        cv = compress(cv, block.ljust(64, b"\0"), 0, len(block), flags)
    return b"".join(w.to_bytes(4, "little") for w in cv)


# BLAKE3's published hash of the empty input.
assert blake3(b"").hex() == "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"

# --- RFC 9162 section 2.1, recursively, with BLAKE3 ----------------------------------------------


def leaf_hash(leaf):
    return blake3(b"\x00" + leaf)


def node_hash(left, right):
    return blake3(b"\x01" + left + right)


def split(n):
    """The largest power of two smaller than n (n > 1)."""
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def mth(leaves):
    if not leaves:
        return blake3(b"")
    if len(leaves) == 1:
        return leaf_hash(leaves[0])
    k = split(len(leaves))
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


def path(m, leaves):
    if len(leaves) == 1:
        return []
    k = split(len(leaves))
    if m < k:
        return path(m, leaves[:k]) + [mth(leaves[k:])]
    return path(m - k, leaves[k:]) + [mth(leaves[:k])]


def subproof(m, leaves, whole):
    n = len(leaves)
    if m == n:
        return [] if whole else [mth(leaves)]
    k = split(n)
    if m <= k:
        return subproof(m, leaves[:k], whole) + [mth(leaves[k:])]
    return subproof(m - k, leaves[k:], False) + [mth(leaves[:k])]


def proof(m, leaves):
    if m == 0 or m == len(leaves):
        return []
    return subproof(m, leaves, True)


# --- the vectors ---------------------------------------------------------------------------------


def compute(file_vectors):
    """The vectors this script computes, for the sizes and proofs the file lists."""
    leaves = [t.encode("ascii") for t in file_vectors["leaves"]]
    return {
        "empty_root": blake3(b"").hex(),
        "leaf_hashes": [leaf_hash(leaf).hex() for leaf in leaves],
        "roots": [{"size": r["size"], "root": mth(leaves[:r["size"]]).hex()} for r in file_vectors["roots"]],
        "inclusion": [
            {"index": p["index"], "size": p["size"],
             "path": [h.hex() for h in path(p["index"], leaves[:p["size"]])]}
            for p in file_vectors["inclusion"]
        ],
        "consistency": [
            {"old": p["old"], "new": p["new"], "path": [h.hex() for h in proof(p["old"], leaves[:p["new"]])]}
            for p in file_vectors["consistency"]
        ],
    }


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "merkle_vectors.json"), encoding="utf-8") as f:
        file_vectors = json.load(f)
    assert file_vectors["leaves"] == [f"leaf {i}" for i in range(len(file_vectors["leaves"]))]
    mine = compute(file_vectors)
    if sys.argv[1:] == ["--print"]:
        print(json.dumps(mine, indent=2))
        return 0
    passed = failed = 0
    for key, value in mine.items():
        items = value if isinstance(value, list) else [value]
        theirs = file_vectors[key] if isinstance(value, list) else [file_vectors[key]]
        if len(items) != len(theirs):
            print(f"{key}: the file holds {len(theirs)} entries, computed {len(items)}")
            failed += 1
            continue
        for computed, stored in zip(items, theirs):
            if computed == stored:
                passed += 1
            else:
                print(f"{key}: the file holds {stored}, computed {computed}")
                failed += 1
    print(f"merkle_vectors: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
