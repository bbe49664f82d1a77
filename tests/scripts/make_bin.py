#!/usr/bin/python3
"""Writes the pytorch_model.bin fixtures tst_torchbin reads.

Usage: make_bin.py OUTDIR

Every saved tensor also gets OUTDIR/<file>/<name>.raw holding its bytes as
torch lays them out in memory, so the test can compare its zero-copy views
byte for byte without trusting this script's idea of the format.

The malicious files are hand-written pickles: if anything ever executed them
they would create OUTDIR/PWNED, which the test asserts never appears.
Exit status 3 means torch is not importable (the test skips).
"""
import io
import os
import pickletools
import struct
import sys
import zipfile
import zlib

try:
    import torch
except ImportError:
    print("torch is not importable by " + sys.executable, file=sys.stderr)
    sys.exit(3)


def raw_bytes(t):
    # bfloat16 has no numpy dtype, so reinterpret every tensor as bytes.
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def save(out, stem, obj, raws=None):
    torch.save(obj, os.path.join(out, stem + ".bin"))
    if raws:
        folder = os.path.join(out, stem)
        os.makedirs(folder, exist_ok=True)
        for name, t in raws.items():
            with open(os.path.join(folder, name + ".raw"), "wb") as f:
                f.write(raw_bytes(t))


def write_archive(path, pickle_bytes, storages=()):
    """A torch-shaped stored zip around a hand-written data.pkl."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle_bytes)
        for key, data in storages:
            z.writestr("archive/data/" + key, data)
        z.writestr("archive/version", "3\n")


def unicode(s):
    b = s.encode()
    return b"X" + struct.pack("<I", len(b)) + b


def malicious(out):
    marker = os.path.join(out, "PWNED")
    # {'weight': os.system('touch PWNED')} through GLOBAL + REDUCE, protocol 2.
    system = (b"\x80\x02}(" + unicode("weight") + b"cos\nsystem\n(" + unicode("touch " + marker) +
              b"tRu.")
    # The same through protocol 4's STACK_GLOBAL: builtins.eval of an open().
    code = "open(%r, 'w').close()" % marker
    framed = (b"}\x94(" + unicode("weight") + b"\x94" + unicode("builtins") + unicode("eval") + b"\x93\x94" +
              unicode(code) + b"\x85\x94R\x94u.")
    eval_ = b"\x80\x04\x95" + struct.pack("<Q", len(framed)) + framed
    for data in (system, eval_):
        pickletools.dis(data, out=io.StringIO())  # well-formed, checked without running it
    write_archive(os.path.join(out, "malicious_system.bin"), system)
    write_archive(os.path.join(out, "malicious_eval.bin"), eval_)


def fp8_v3(out):
    """_rebuild_tensor_v3 over an UntypedStorage, as torch >= 2.1 saves
    float8 tensors; written by hand since this torch may predate it."""
    data = bytes(range(16))
    p = (b"\x80\x02}(" + unicode("w8") + b"ctorch._utils\n_rebuild_tensor_v3\n((" + unicode("storage") +
         b"ctorch\nUntypedStorage\n" + unicode("0") + unicode("cpu") + b"K\x10tQ" +
         b"K\x04K\x03K\x04\x86K\x04K\x01\x86\x89ccollections\nOrderedDict\n)R" +
         b"ctorch\nfloat8_e4m3fn\ntRu.")
    pickletools.dis(p, out=io.StringIO())
    write_archive(os.path.join(out, "fp8_v3.bin"), p, [("0", data)])


def zip64_copy(src, dst):
    """Rewrites src with every size and offset moved into zip64 extra fields,
    the layout torch's writer uses for entries past 4 GiB."""
    entries = [(i.filename, zipfile.ZipFile(src).read(i.filename)) for i in zipfile.ZipFile(src).infolist()]
    body, central = bytearray(), bytearray()
    for name, data in entries:
        n, crc, off = name.encode(), zlib.crc32(data), len(body)
        local_extra = struct.pack("<HHQQ", 1, 16, len(data), len(data))
        body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
                            len(n), len(local_extra)) + n + local_extra + data
        extra = struct.pack("<HHQQQ", 1, 24, len(data), len(data), off)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF,
                               0xFFFFFFFF, len(n), len(extra), 0, 0, 0, 0, 0xFFFFFFFF) + n + extra
    cd_off, z64 = len(body), len(body) + len(central)
    tail = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, len(entries), len(entries), len(central), cd_off)
    tail += struct.pack("<IIQI", 0x07064B50, 0, z64, 1)
    tail += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    with open(dst, "wb") as f:
        f.write(bytes(body + central + tail))


def fuzz(out, count=300):
    """Archives whose data.pkl has random bytes changed, re-zipped with valid
    CRCs so the damage reaches the unpickler rather than the checksum test."""
    import random
    rng = random.Random(1234)
    folder = os.path.join(out, "fuzz")
    os.makedirs(folder, exist_ok=True)
    with zipfile.ZipFile(os.path.join(out, "module.bin")) as z:
        entries = [(n, z.read(n)) for n in z.namelist()]
    for i in range(count):
        with zipfile.ZipFile(os.path.join(folder, "%03d.bin" % i), "w", zipfile.ZIP_STORED) as dst:
            for name, data in entries:
                if name.endswith("/data.pkl"):
                    data = bytearray(data)
                    for _ in range(rng.randint(1, 4)):
                        data[rng.randrange(len(data))] = rng.randrange(256)
                    data = bytes(data)
                dst.writestr(name, data)


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)

    big = torch.arange(10, dtype=torch.float32)
    longs = torch.arange(20, dtype=torch.int64) * 1000003
    basic = {
        "f32": torch.randn(2, 3),
        "f16": torch.randn(4, 5).half(),
        "bf16": torch.randn(3, 7).bfloat16(),
        "i64": torch.tensor([[1, -2], [3, 4000000000000]], dtype=torch.int64),
        "flags": torch.tensor([True, False, True, True]),
        "scalar": torch.tensor(3.5),
        "big": big,
        "view": big[2:5],   # shares big's storage at storage_offset 2
        "tail": longs[5:],  # a view whose base is not saved: the whole storage is
        "param": torch.nn.Parameter(torch.randn(3)),  # _rebuild_parameter
    }
    save(out, "basic", basic, basic)

    w = torch.randn(6, 4)
    save(out, "tied", {"embed.weight": w, "lm_head.weight": w}, {"w": w})

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    model.eval()
    sd = model.state_dict()
    save(out, "module", sd, {k.replace(".", "_"): v for k, v in sd.items()})
    with open(os.path.join(out, "module", "names.txt"), "w") as f:
        f.write("\n".join(sd.keys()) + "\n")

    save(out, "nested", {"model": sd, "epoch": 3})
    save(out, "noncontig", {"t": torch.arange(6.0).reshape(2, 3).t()})
    torch.save({"w": torch.ones(2)}, os.path.join(out, "legacy.bin"), _use_new_zipfile_serialization=False)

    with open(os.path.join(out, "basic.bin"), "rb") as f:
        whole = f.read()
    with open(os.path.join(out, "truncated.bin"), "wb") as f:
        f.write(whole[: len(whole) // 2])
    with zipfile.ZipFile(os.path.join(out, "basic.bin")) as src, \
            zipfile.ZipFile(os.path.join(out, "deflated.bin"), "w", zipfile.ZIP_DEFLATED) as dst:
        for name in src.namelist():
            dst.writestr(name, src.read(name))
    zip64_copy(os.path.join(out, "basic.bin"), os.path.join(out, "zip64.bin"))

    malicious(out)
    fp8_v3(out)
    fuzz(out)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
