"""TensorBoard event files for the tests, read two ways, each for its own job:

  read(dir)       TensorBoard's own reader (EventAccumulator, every point kept) over the event files
                  of dir: {"scalars": {tag: [(step, float32 bytes)] in the order read}, "texts":
                  [(step, tag, text)] of the text plugin}. For a v2 file it drops nothing (it
                  purges only at a SessionLog START, which wmtp does not write), so a step written
                  again after a resume appears twice;
  preempt(series) TensorBoard's data server's rule on that stream (the reader behind its UI,
                  tensorboard/data/server/reservoir.rs): a point at step s discards the same tag's
                  points at steps >= s read before -> {(tag, step): float32 bytes}
  check_wire(dir) what TensorBoard tolerates and so cannot check: TFRecord framing with both
                  masked CRC-32Cs recomputed here, every Event decoded field by field accepting only
                  the fields (and wire types) of event.proto/summary.proto wmtp may write,
                  file_version first and once per file, text tensors scalar DT_STRING. Written from
                  the formats' specifications, sharing no code with src/track or TensorBoard.
                  Returns [(path, [Event dict])] in file name order.
  f32(x)          the 4 bytes of x as float32 (what simple_value holds)
"""
import glob
import os
import struct

# CRC-32C from its definition (reflected polynomial 0x82F63B78), bit by bit.
def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF

def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF

def records(path):
    data = open(path, "rb").read()
    pos, out = 0, []
    while pos < len(data):
        assert pos + 12 <= len(data), f"{path}: truncated record header at byte {pos}"
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        assert hcrc == masked(crc32c(header)), f"{path}: bad length CRC at byte {pos}"
        body = data[pos + 12:pos + 12 + length]
        assert len(body) == length, f"{path}: truncated record at byte {pos}"
        (dcrc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        assert dcrc == masked(crc32c(body)), f"{path}: bad data CRC at byte {pos}"
        out.append(body)
        pos += 16 + length
    return out

def varint(buf, pos):
    shift = value = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos

def fields(buf):
    """[(field number, wire type, value)]; value: int (varint), bytes (fixed/length-delimited)."""
    pos, out = 0, []
    while pos < len(buf):
        key, pos = varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, pos = varint(buf, pos)
        elif wt == 1:
            v, pos = buf[pos:pos + 8], pos + 8
        elif wt == 5:
            v, pos = buf[pos:pos + 4], pos + 4
        elif wt == 2:
            n, pos = varint(buf, pos)
            v, pos = buf[pos:pos + n], pos + n
        else:
            raise AssertionError(f"unexpected wire type {wt}")
        assert pos <= len(buf), "field runs past its message"
        out.append((num, wt, v))
    return out

def expect(msg, spec, what):
    """Decode a message whose allowed fields are spec = {number: (name, wire type, repeated)}."""
    out = {}
    for num, wt, v in fields(msg):
        assert num in spec, f"{what}: unexpected field {num}"
        name, want_wt, repeated = spec[num]
        assert wt == want_wt, f"{what}.{name}: wire type {wt}, expected {want_wt}"
        if repeated:
            out.setdefault(name, []).append(v)
        else:
            assert name not in out, f"{what}.{name} appears twice"
            out[name] = v
    return out

def signed64(v):
    return v - (1 << 64) if v >= 1 << 63 else v

def decode_value(buf):
    v = expect(buf, {1: ("tag", 2, False), 2: ("simple_value", 5, False), 8: ("tensor", 2, False),
                     9: ("metadata", 2, False)}, "Summary.Value")
    out = {"tag": v["tag"].decode()}
    if "simple_value" in v:
        out["simple_value"] = v["simple_value"]  # the 4 raw bytes (compared bitwise)
        assert "tensor" not in v
    else:
        t = expect(v["tensor"], {1: ("dtype", 0, False), 2: ("tensor_shape", 2, False), 8: ("string_val", 2, True)},
                   "TensorProto")
        assert t["dtype"] == 7, "text tensor must be DT_STRING"
        assert t["tensor_shape"] == b"", "text tensor must be a scalar"
        assert len(t["string_val"]) == 1
        meta = expect(v["metadata"], {1: ("plugin_data", 2, False)}, "SummaryMetadata")
        plugin = expect(meta["plugin_data"], {1: ("plugin_name", 2, False), 2: ("content", 2, False)}, "PluginData")
        assert plugin["plugin_name"] == b"text"
        out["text"] = t["string_val"][0].decode()
    return out

def decode_event(buf):
    e = expect(buf, {1: ("wall_time", 1, False), 2: ("step", 0, False), 3: ("file_version", 2, False),
                     5: ("summary", 2, False)}, "Event")
    out = {"wall_time": struct.unpack("<d", e["wall_time"])[0], "step": signed64(e.get("step", 0))}
    if "file_version" in e:
        out["file_version"] = e["file_version"].decode()
        assert "summary" not in e
    if "summary" in e:
        s = expect(e["summary"], {1: ("value", 2, True)}, "Summary")
        out["values"] = [decode_value(v) for v in s.get("value", [])]
    return out

def event_files(d):
    return sorted(glob.glob(os.path.join(d, "events.out.tfevents.*")))

def check_wire(d):
    out = []
    for path in event_files(d):
        evs = [decode_event(r) for r in records(path)]
        assert evs and evs[0].get("file_version") == "brain.Event:2", f"{path}: first event is not file_version"
        assert all("file_version" not in e for e in evs[1:]), f"{path}: file_version after the first event"
        out.append((path, evs))
    return out


def read(d):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(d, size_guidance={"scalars": 0, "tensors": 0})  # 0: keep every point
    acc.Reload()
    tags = acc.Tags()
    scalars = {t: [(e.step, f32(e.value)) for e in acc.Scalars(t)] for t in tags["scalars"]}
    texts = []
    for t in tags["tensors"]:
        assert acc.SummaryMetadata(t).plugin_data.plugin_name == "text", f"tensor {t} is not a text summary"
        texts += [(e.step, t, e.tensor_proto.string_val[0].decode()) for e in acc.Tensors(t)]
    return {"scalars": scalars, "texts": sorted(texts)}


def preempt(series):
    out = {}
    for tag, pts in series.items():
        kept = []
        for step, v in pts:
            kept = [(s, x) for s, x in kept if s < step] + [(step, v)]
        out.update({(tag, s): x for s, x in kept})
    return out


def f32(x):
    return struct.pack("<f", x)
