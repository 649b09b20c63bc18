"""TensorFlow's stateless random ops in numpy, bit for bit: what the reader's order and dynamic
masks draw, so that the numpy reader (`batches.py`) gives the tf.data reader's batches without
TensorFlow.

    key, counter = key_counter((seed, step))      # tf.raw_ops.StatelessRandomGetKeyCounter
    uniform((4, 7), (seed, step))                  # tf.random.stateless_uniform, float32 in [0, 1)
    uniform_int((4, 7), (seed, step), 0, 5)        # ... with minval, maxval and dtype=tf.int32
    full_int64((2,), (seed, step))                 # ... dtype=tf.int64, no bounds
    shuffle(np.arange(9), (seed, step))            # tf.random.experimental.stateless_shuffle
    split((seed, step), 4); fold_in((seed, step), w)   # tf.random.experimental.stateless_split, _fold_in

TensorFlow's kernels on the CPU (where tf.data runs) with the "auto_select" algorithm, Philox4x32-10
(Salmon et al. 2011, "Parallel random numbers: as easy as 1, 2, 3"):
- a seed (two int64) becomes a key and a counter by one Philox block of the seed under a fixed
  key (TensorFlow's `GenerateKey`): key = its first two words, counter = (0, 0, its last two);
- a fill of N values takes Philox blocks at counter, counter + 1, ... (the counter a 128-bit
  integer), four 32-bit words each: a float32 or an int32 per word, an int64 per two words;
- a shuffle draws one word per position, front to back: position i swaps with
  i + word % (n - i) (TensorFlow's `ShuffleRange`).
tests/pipeline/test_stateless.py holds each function to TensorFlow's op on many seeds and shapes.
"""

from __future__ import annotations

import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)  # Philox4x32's multipliers
_W0, _W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)  # its key increments (Weyl sequence)
_LOW = np.uint64(0xFFFFFFFF)
_SCRAMBLE_KEY = (np.uint32(0x3EC8F720), np.uint32(0x02461E29))  # TensorFlow's seed scrambling key


def philox(counters: np.ndarray, key: tuple[np.uint32, np.uint32]) -> np.ndarray:
    """Philox4x32-10 of (N, 4) uint32 counters under a two-word key -> (N, 4) uint32 words."""
    c0, c1, c2, c3 = (counters[:, i].astype(np.uint64) for i in range(4))
    k0, k1 = np.uint32(key[0]), np.uint32(key[1])
    with np.errstate(over="ignore"):  # the key's increments wrap around 2**32, as in C
        for round_ in range(10):
            p0, p1 = _M0 * c0, _M1 * c2
            c0, c1, c2, c3 = (
                (p1 >> np.uint64(32)) ^ c1 ^ np.uint64(k0),
                p1 & _LOW,
                (p0 >> np.uint64(32)) ^ c3 ^ np.uint64(k1),
                p0 & _LOW,
            )
            if round_ < 9:
                k0, k1 = k0 + _W0, k1 + _W1
    return np.stack([c0, c1, c2, c3], axis=1).astype(np.uint32)


def _as_seed(seed) -> tuple[int, int]:
    """A seed as TensorFlow reads one: two integers, each taken as a 64-bit two's complement."""
    first, second = (int(s) & 0xFFFFFFFFFFFFFFFF for s in np.asarray(seed).reshape(-1)[:2])
    return first, second


def key_counter(seed) -> tuple[tuple[np.uint32, np.uint32], np.ndarray]:
    """TensorFlow's key and counter of a seed (its `StatelessRandomGetKeyCounter`): the seed's two
    words each split in halves, through one Philox block under a fixed key."""
    s0, s1 = _as_seed(seed)
    block = np.array([[s0 & 0xFFFFFFFF, s0 >> 32, s1 & 0xFFFFFFFF, s1 >> 32]], np.uint32)
    mix = philox(block, _SCRAMBLE_KEY)[0]
    return (mix[0], mix[1]), np.array([0, 0, mix[2], mix[3]], np.uint32)


def _blocks(counter: np.ndarray, n: int) -> np.ndarray:
    """Counters counter + 0 ... counter + n - 1 (a 128-bit integer in four words). A seed's
    counter starts at 0 in its low 64 bits (`key_counter`), so they never carry into the high."""
    low = (int(counter[0]) | int(counter[1]) << 32) + np.arange(n, dtype=np.uint64)
    high = counter[2:].reshape(1, 2).repeat(n, axis=0)
    return np.concatenate([np.stack([low & _LOW, low >> np.uint64(32)], axis=1).astype(np.uint32), high], 1)


def words(n: int, seed) -> np.ndarray:
    """The first n 32-bit words of the seed's Philox stream, in the order TensorFlow fills with."""
    key, counter = key_counter(seed)
    return philox(_blocks(counter, -(-n // 4)), key).reshape(-1)[:n]


def uniform(shape, seed) -> np.ndarray:
    """`tf.random.stateless_uniform(shape, seed)`: float32 in [0, 1), 23 random mantissa bits per
    word (a float in [1, 2) less one, as TensorFlow's `Uint32ToFloat`)."""
    n = int(np.prod(shape))
    bits = (words(n, seed) & np.uint32(0x7FFFFF)) | np.uint32(0x3F800000)
    return (bits.view(np.float32) - np.float32(1.0)).reshape(shape)


def uniform_int(shape, seed, minval: int, maxval: int) -> np.ndarray:
    """`tf.random.stateless_uniform(shape, seed, minval, maxval, dtype=tf.int32)`: one word per
    value, minval + word % (maxval - minval)."""
    n = int(np.prod(shape))
    return (
        (minval + (words(n, seed) % np.uint32(maxval - minval)).astype(np.int64))
        .astype(np.int32)
        .reshape(shape)
    )


def full_int64(shape, seed) -> np.ndarray:
    """`tf.random.stateless_uniform(shape, seed, dtype=tf.int64, minval=None, maxval=None)`: two
    words per value, the first the low half."""
    n = int(np.prod(shape))
    pairs = words(2 * n, seed).astype(np.uint64).reshape(n, 2)
    return (pairs[:, 0] | pairs[:, 1] << np.uint64(32)).view(np.int64).reshape(shape)


def split(seed, num: int = 2) -> np.ndarray:
    """`tf.random.experimental.stateless_split(seed, num)`: (num, 2) new int64 seeds."""
    return full_int64((num, 2), seed)


def fold_in(seed, data: int) -> np.ndarray:
    """`tf.random.experimental.stateless_fold_in(seed, data)` for int64 data: (a draw, data)."""
    return np.array([full_int64((), seed), data], np.int64)


def shuffle(values: np.ndarray, seed) -> np.ndarray:
    """`tf.random.experimental.stateless_shuffle(values, seed)` along the first axis: position i
    swaps with i + word_i % (n - i), i = 0 ... n - 2 (TensorFlow's `ShuffleRange`)."""
    n = len(values)
    if n <= 1:
        return np.array(values, copy=True)
    draws = (words(n - 1, seed) % np.arange(n, 1, -1, dtype=np.uint32)).tolist()
    order = list(range(n))
    for i, step in enumerate(draws):  # sequential by definition; ~0.2 us per position
        j = i + step
        order[i], order[j] = order[j], order[i]
    return np.asarray(values)[order]
