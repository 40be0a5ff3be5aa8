#!/usr/bin/python3
"""The built-in quantized comm codecs (`shardrec codec`, what the output
dist runs on every block) against NumPy references written from the codecs'
definitions in docs/comm.md:

  fp16  numpy's float16 cast (round to nearest even)
  bf16  the top 16 bits of float32, rounded to nearest even
  int8  per row: scale = (max - min) / 255, bias = min, q = rint((x - min) * 255 / (range + 1e-8)),
        then the row's float32 scale and bias as 8 bytes
  fp8   per row: scale = max|x| / 448 (1 for a zero row), q = the E4M3 value nearest x / scale
        (ties to the even code), found by searching all 256 codes; then the float32 scale

Encoding must match the reference byte for byte (int8: each q within 1 of
the reference's, where float rounding of (x - min) * inverse may differ;
scale and bias bit for bit); decoding the reference's bytes with
`shardrec codec --from-encoded` must give the reference's decoded values.
Random blocks with rows of very different ranges, zeros, constants,
negative values, subnormal fp8 results, and saturating fp16.

usage: codecs_match_numpy_test.py SHARDREC_EXE
Exit 77 (skip) when numpy is missing."""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError as e:
    print(f"SKIP: {e.name} is not importable under {sys.executable}")
    sys.exit(77)

exe = os.path.abspath(sys.argv[1])
np.seterr(all="ignore")  # the edge rows overflow fp16 and hold infinities on purpose
failures = []


def expect(name, cond, detail=""):
    print(("PASS " if cond else "FAIL ") + name + ("" if cond else ": " + str(detail)))
    if not cond:
        failures.append(name)


# ---- references

def bf16_encode(x):
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    nan = np.isnan(x)
    rounded[nan] = (b[nan] >> 16) | 0x40
    return rounded.astype(np.uint16)


def bf16_decode(q):
    return (q.astype(np.uint32) << 16).view(np.float32)


def int8_encode(x):
    rows = []
    for row in x:
        lo, hi = np.float32(row.min()), np.float32(row.max())
        rng = np.float32(hi - lo)
        scale = np.float32(rng / np.float32(255.0))
        inverse = np.float32(np.float32(255.0) / np.float32(rng + np.float32(1e-8)))
        q = np.clip(np.rint((row - lo) * inverse), 0, 255).astype(np.uint8)
        rows.append(np.concatenate([q, np.array([scale, lo], dtype=np.float32).view(np.uint8)]))
    return np.concatenate(rows)


def int8_decode(q, rows, cols):
    out = np.empty((rows, cols), dtype=np.float32)
    q = q.reshape(rows, cols + 8)
    for r in range(rows):
        scale, bias = q[r, cols:].view(np.float32)
        out[r] = q[r, :cols].astype(np.float32) * scale + bias
    return out


def fp8_values():
    codes = np.arange(256)
    e, m = (codes >> 3) & 0xF, codes & 7
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1 + m / 8.0) * 2.0 ** (e - 7.0))
    v = np.where(codes & 0x80, -v, v)
    v[(codes & 0x7F) == 0x7F] = np.nan
    return v


FP8 = fp8_values()


def fp8_nearest(y):
    """The E4M3 code nearest y: the nearest magnitude (ties to the even
    code, saturating at 448) with y's sign, as IEEE rounding keeps it (a
    negative value that rounds to zero is -0.0)."""
    sign = 0x80 if np.signbit(y) else 0x00
    a = abs(float(y))
    if a >= 448:
        return sign | 0x7E
    best, best_err = None, None
    for c in range(0x7F):  # the positive finite codes
        err = abs(FP8[c] - a)
        if best is None or err < best_err or (err == best_err and (c & 1) == 0 and (best & 1) == 1):
            best, best_err = c, err
    return sign | best


def fp8_encode(x):
    rows = []
    for row in x:
        amax = np.float32(np.abs(row).max())
        scale = np.float32(amax / np.float32(448.0)) if amax > 0 else np.float32(1.0)
        y = (row / scale).astype(np.float32)
        q = np.array([fp8_nearest(v) for v in y], dtype=np.uint8)
        rows.append(np.concatenate([q, np.array([scale], dtype=np.float32).view(np.uint8)]))
    return np.concatenate(rows)


def fp8_decode(q, rows, cols):
    out = np.empty((rows, cols), dtype=np.float32)
    q = q.reshape(rows, cols + 4)
    for r in range(rows):
        scale = q[r, cols:].view(np.float32)[0]
        out[r] = FP8[q[r, :cols]].astype(np.float32) * scale
    return out


REFS = {
    "fp16": (lambda x: x.astype(np.float16).reshape(-1), lambda q, r, c: q.astype(np.float32).reshape(r, c)),
    "bf16": (lambda x: bf16_encode(x).reshape(-1), lambda q, r, c: bf16_decode(q).reshape(r, c)),
    "int8": (int8_encode, int8_decode),
    "fp8": (fp8_encode, fp8_decode),
}


def blocks():
    rng = np.random.default_rng(20)
    yield "random", (rng.standard_normal((9, 17)) * (2.0 ** rng.integers(-6, 6, size=(9, 1)))).astype(np.float32)
    edge = np.zeros((5, 6), dtype=np.float32)
    edge[1] = 3.25
    edge[2] = [-1e-3, 2e-6, 5e-9, -7.5, 0.0, 448.0]
    edge[3] = [1e-30, -1e-30, 0, 2e-30, 0, 0]
    edge[4] = [6.5e4, -7e4, 1, -1, 0.5, 1e5]  # fp16 saturates to +-inf past 65504
    yield "edge", edge
    yield "one column", rng.standard_normal((4, 1)).astype(np.float32)
    # Every positive FP8 value and every midpoint between neighbours (the
    # ties), with 448 in the row so fp8's scale is exactly 1; and negated.
    pos = np.sort(np.unique(FP8[[c for c in range(0x7F) if not np.isnan(FP8[c])]]))
    mids = (pos[:-1] + pos[1:]) / 2
    row = np.concatenate([[448.0], pos, mids]).astype(np.float32)
    yield "fp8 ties", np.stack([row, -row])


def shardrec(*args):
    r = subprocess.run([exe, "codec", *args, "--json"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"shardrec codec {' '.join(args)}: {r.stderr}")
    return json.loads(r.stdout)


with tempfile.TemporaryDirectory() as tmp:
    for block_name, x in blocks():
        rows, cols = x.shape
        src = os.path.join(tmp, "x.npy")
        np.save(src, x)
        for codec, (encode, decode) in REFS.items():
            tag = f"{codec} {block_name}"
            enc, dec = os.path.join(tmp, f"{codec}.q.npy"), os.path.join(tmp, f"{codec}.d.npy")
            info = shardrec(codec, src, "--encoded", enc, "--decoded", dec)
            got = np.load(enc)
            want = encode(x)
            expect(f"{tag}: encoded size", got.nbytes == want.nbytes and info["bytes_encoded"] == want.nbytes,
                   (got.nbytes, want.nbytes))
            gb, wb = got.view(np.uint8), want.view(np.uint8)
            if codec == "int8":
                g2, w2 = gb.reshape(rows, cols + 8), wb.reshape(rows, cols + 8)
                qdiff = np.abs(g2[:, :cols].astype(int) - w2[:, :cols].astype(int)).max()
                expect(f"{tag}: q within 1 of the reference", qdiff <= 1, qdiff)
                expect(f"{tag}: scale and bias bit for bit", np.array_equal(g2[:, cols:], w2[:, cols:]))
            else:
                same = np.array_equal(gb, wb)
                where = "" if same else np.flatnonzero(gb != wb)[:5]
                expect(f"{tag}: encoded bytes equal the reference's", same, where)
            # Decoding the reference's bytes gives the reference's values.
            ref_q = os.path.join(tmp, f"{codec}.ref.npy")
            np.save(ref_q, want if codec not in ("bf16",) else want.view(np.uint16))
            back = os.path.join(tmp, f"{codec}.back.npy")
            shardrec(codec, "--from-encoded", ref_q, "--shape", f"{rows},{cols}", "--decoded", back)
            want_back = decode(want, rows, cols)
            got_back = np.load(back)
            expect(f"{tag}: decode equals the reference's decode",
                   np.array_equal(got_back, want_back, equal_nan=True),
                   np.flatnonzero(got_back != want_back)[:5])

    # The size a block encodes to: TorchRec's calc_quantized_size.
    x = np.ones((3, 10), dtype=np.float32)
    np.save(os.path.join(tmp, "ones.npy"), x)
    for codec, size in {"fp16": 60, "bf16": 60, "int8": 3 * 18, "fp8": 3 * 14}.items():
        info = shardrec(codec, os.path.join(tmp, "ones.npy"))
        expect(f"{codec}: bytes of a 3 x 10 block", info["bytes_encoded"] == size, info["bytes_encoded"])

    # Hostile input: a wrong-sized encoded file is refused, naming the sizes.
    bad = os.path.join(tmp, "bad.npy")
    np.save(bad, np.zeros(7, dtype=np.uint8))
    r = subprocess.run([exe, "codec", "int8", "--from-encoded", bad, "--shape", "2,3"], capture_output=True, text=True,
                       timeout=60)
    expect("a wrong-sized encoded file is refused", r.returncode != 0 and "encodes to 22 elements" in r.stderr,
           r.stderr)
    r = subprocess.run([exe, "codec", "int3", os.path.join(tmp, "ones.npy")], capture_output=True, text=True, timeout=60)
    expect("an unknown codec is refused", r.returncode != 0 and "int3" in r.stderr, r.stderr)

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
