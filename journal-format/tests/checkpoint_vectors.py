#!/usr/bin/env python3
"""Checks journal-format/tests/checkpoint_vectors.json with an implementation of its own.

The golden vectors of the journal's signed checkpoints (docs/FORMAT.md, "Checkpoints and proof
documents") are written by the Rust code (`CHECKPOINT_VECTORS_WRITE=1 cargo test -p
journal-format --test checkpoint`). This script recomputes them from the document alone,
sharing no code with the crate: Ed25519 written out from RFC 8032 section 5.1 (key generation,
signing and verification over edwards25519 in extended coordinates), the key ids and key texts
of the signed-note format, and the checkpoint body's five lines. It also reads the signed texts
as a verifier would (the body ends at the last empty line; each signature line names a key and
carries base64(key id || signature)) and verifies every signature. Standard library only.

    python3 journal-format/tests/checkpoint_vectors.py
"""

import base64
import datetime
import hashlib
import json
import os
import sys

# --- Ed25519 (RFC 8032, section 5.1) ------------------------------------------------------------

P = 2**255 - 19
L = 2**252 + 27742317777372353535851937790883648493
D = -121665 * pow(121666, P - 2, P) % P
SQRT_M1 = pow(2, (P - 1) // 4, P)


def add(a, b):
    x1, y1, z1, t1 = a
    x2, y2, z2, t2 = b
    k_a = (y1 - x1) * (y2 - x2) % P
    k_b = (y1 + x1) * (y2 + x2) % P
    k_c = 2 * t1 * t2 * D % P
    k_d = 2 * z1 * z2 % P
    e, f, g, h = k_b - k_a, k_d - k_c, k_d + k_c, k_b + k_a
    return (e * f % P, g * h % P, f * g % P, e * h % P)


def mul(scalar, point):
    result = (0, 1, 1, 0)
    while scalar > 0:
        if scalar & 1:
            result = add(result, point)
        point = add(point, point)
        scalar >>= 1
    return result


def same(a, b):
    return (a[0] * b[2] - b[0] * a[2]) % P == 0 and (a[1] * b[2] - b[1] * a[2]) % P == 0


def recover_x(y, sign):
    if y >= P:
        return None
    x2 = (y * y - 1) * pow(D * y * y + 1, P - 2, P) % P
    if x2 == 0:
        return None if sign else 0
    x = pow(x2, (P + 3) // 8, P)
    if (x * x - x2) % P != 0:
        x = x * SQRT_M1 % P
    if (x * x - x2) % P != 0:
        return None
    if (x & 1) != sign:
        x = P - x
    return x


BASE_Y = 4 * pow(5, P - 2, P) % P
BASE_X = recover_x(BASE_Y, 0)
BASE = (BASE_X, BASE_Y, 1, BASE_X * BASE_Y % P)


def compress(point):
    zinv = pow(point[2], P - 2, P)
    x, y = point[0] * zinv % P, point[1] * zinv % P
    return int.to_bytes(y | ((x & 1) << 255), 32, "little")


def decompress(data):
    y = int.from_bytes(data, "little")
    sign, y = y >> 255, y & ((1 << 255) - 1)
    x = recover_x(y, sign)
    return None if x is None else (x, y, 1, x * y % P)


def sha512_int(*parts):
    return int.from_bytes(hashlib.sha512(b"".join(parts)).digest(), "little")


def expand(seed):
    digest = hashlib.sha512(seed).digest()
    scalar = int.from_bytes(digest[:32], "little")
    scalar &= (1 << 254) - 8
    scalar |= 1 << 254
    return scalar, digest[32:]


def public_key(seed):
    return compress(mul(expand(seed)[0], BASE))


def sign(seed, message):
    scalar, prefix = expand(seed)
    public = compress(mul(scalar, BASE))
    r = sha512_int(prefix, message) % L
    big_r = compress(mul(r, BASE))
    h = sha512_int(big_r, public, message) % L
    return big_r + int.to_bytes((r + h * scalar) % L, 32, "little")


def verify(public, message, signature):
    if len(public) != 32 or len(signature) != 64:
        return False
    point_a, point_r = decompress(public), decompress(signature[:32])
    s = int.from_bytes(signature[32:], "little")
    if point_a is None or point_r is None or s >= L:
        return False
    h = sha512_int(signature[:32], public, message) % L
    return same(mul(s, BASE), add(point_r, mul(h, point_a)))


# --- signed notes and checkpoints ----------------------------------------------------------------

EM_DASH = "\u2014"
ED25519 = b"\x01"


def key_id(name, public):
    return hashlib.sha256(name.encode() + b"\n" + ED25519 + public).digest()[:4]


def b64(data):
    return base64.b64encode(data).decode()


def body_of(c):
    seconds, nanos = divmod(c["time_ns"], 10**9)
    moment = datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc)
    lines = [
        c["origin"],
        str(c["tree_size"]),
        b64(bytes.fromhex(c["root"])),
        "chain %d %s" % (c["chain_position"], c["chain_hash"]),
        "time %s.%09dZ" % (moment.strftime("%Y-%m-%dT%H:%M:%S"), nanos),
    ]
    return "".join(line + "\n" for line in lines)


def signature_line(key, body):
    seed = bytes.fromhex(key["seed"])
    ident = key_id(key["name"], public_key(seed))
    return "%s %s %s\n" % (EM_DASH, key["name"], b64(ident + sign(seed, body.encode())))


def open_note(text, known):
    """The body and the names of the known keys whose signatures verify; raises on a bad one."""
    split = text.rindex("\n\n")
    body, lines = text[: split + 1], text[split + 2 :]
    assert lines.endswith("\n"), "signature lines end in a newline"
    verified = []
    for line in lines[:-1].split("\n"):
        assert line.startswith(EM_DASH + " "), line
        name, encoded = line[2:].split(" ", 1)
        raw = base64.b64decode(encoded, validate=True)
        public = known.get((name, raw[:4]))
        if public is None:
            continue
        assert verify(public, body.encode(), raw[4:]), "signature by %s does not verify" % name
        verified.append(name)
    return body, verified


def check(vectors):
    known = {}
    for key in vectors["keys"]:
        seed = bytes.fromhex(key["seed"])
        public = public_key(seed)
        ident = key_id(key["name"], public)
        assert public.hex() == key["public_key"], key["name"]
        assert ident.hex() == key["key_id"], key["name"]
        assert key["verifier_text"] == "%s+%s+%s" % (key["name"], ident.hex(), b64(ED25519 + public))
        assert key["private_text"] == "PRIVATE+KEY+%s+%s+%s" % (key["name"], ident.hex(), b64(ED25519 + seed))
        known[(key["name"], ident)] = public
    body = body_of(vectors["checkpoint"])
    assert body == vectors["body"], (body, vectors["body"])
    log, witness = vectors["keys"]
    signed = body + "\n" + signature_line(log, body)
    assert signed == vectors["signed"], (signed, vectors["signed"])
    assert vectors["cosigned"] == signed + signature_line(witness, body)
    names = [key["name"] for key in vectors["keys"]]
    for text, signers in (("signed", names[:1]), ("cosigned", names)):
        opened, verified = open_note(vectors[text], known)
        assert opened == body and verified == signers, (text, verified)
    # A changed body fails: the signature covers every byte of it.
    forged = vectors["signed"].replace("\n6700\n", "\n6701\n", 1)
    try:
        open_note(forged, known)
    except AssertionError:
        pass
    else:
        raise AssertionError("a changed body verified")


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "checkpoint_vectors.json")
    with open(path, encoding="utf-8") as f:
        vectors = json.load(f)
    check(vectors)
    print("checkpoint_vectors.json: %d keys, the body and both signed texts recomputed and verified" % len(vectors["keys"]))


if __name__ == "__main__":
    sys.exit(main())
