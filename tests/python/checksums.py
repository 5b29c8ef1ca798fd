"""The checksums of recur's file and wire formats, written out independently of the C code (the
reference the tests check it against): FNV-1a 64 (core/util.h recur__fnv1a), the lane checksum
(core/util.h recur__lanesum: snapshots of version 4 / 5, the weights cache's payload), and the
rules of a snapshot's own checksum (core/snapshot.c) and of its logits trailer's
(proto/state_blob.h), by the core's version."""
import struct

FNV_OFFSET = 0xcbf29ce484222325
FNV_PRIME = 0x100000001b3
M64 = (1 << 64) - 1
LANE_VERSIONS = (4, 5)  # snapshot versions whose checksum is the lane checksum; 1, 2, 3: FNV-1a


def fnv1a(data, h=FNV_OFFSET):
    """FNV-1a 64 over data's bytes, continued from h."""
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & M64
    return h


def lanesum(data):
    """The lane checksum of data: lane j starts at FNV_OFFSET + j; every 64-bit little-endian word
    i of the whole 32-byte blocks goes into lane i mod 4 as lane = (lane ^ word) * FNV_PRIME; then
    FNV-1a 64 over the four lanes' bytes (little-endian), the tail (len mod 32 bytes) and the
    length as a little-endian u64."""
    data = bytes(data)
    whole = len(data) - len(data) % 32
    words = struct.unpack_from("<%dQ" % (whole // 8), data, 0)
    lanes = []
    for j in range(4):
        h = FNV_OFFSET + j
        for w in words[j::4]:
            h = ((h ^ w) * FNV_PRIME) & M64
        lanes.append(h)
    return fnv1a(struct.pack("<4Q", *lanes) + data[whole:] + struct.pack("<Q", len(data)))


def version(blob):
    return struct.unpack_from("<I", blob, 8)[0]


def snapshot_sum(core):
    """The checksum a snapshot's bytes before it (core without its last 8 bytes) must carry, by
    the version in its header."""
    return lanesum(core) if version(core) in LANE_VERSIONS else fnv1a(core)


def core_length(blob):
    return 40 + struct.unpack_from("<Q", blob, 32)[0] + 8


def reseal(blob):
    """blob (a snapshot, optionally with a logits trailer) with its checksums recomputed by its
    version's rules: the core's, then the trailer's."""
    b = bytearray(blob)
    n = core_length(b)
    struct.pack_into("<Q", b, n - 8, snapshot_sum(bytes(b[:n - 8])))
    if len(b) > n:
        struct.pack_into("<Q", b, len(b) - 8, trailer_sum(bytes(b[:n]), bytes(b[n:-8])))
    return bytes(b)


def as_version(blob, v):
    """The snapshot (and trailer) with its version field set to v and its checksums recomputed."""
    b = bytearray(blob)
    struct.pack_into("<I", b, 8, v)
    return reseal(b)


def trailer_sum(core, trailer):
    """The logits trailer's checksum after core (the whole core snapshot) for the trailer's bytes
    before its checksum: version 4 / 5 FNV-1a 64 over the core's 8 checksum bytes then the
    trailer's; version 1-3 FNV-1a 64 over the core and the trailer."""
    if version(core) in LANE_VERSIONS:
        return fnv1a(trailer, fnv1a(core[-8:]))
    return fnv1a(trailer, fnv1a(core))
